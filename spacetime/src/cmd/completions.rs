//! `spacetime completions SHELL`: the scripts clap_complete generates from the parser's
//! definitions, and for bash what they cannot know: the command `trace` runs (a command name,
//! then that command's own completion, or files), pids after `trace -p` and `watch
//! --pid-tree`, and the events `watch --events` lists.

use std::io::Write;

use super::cli::{Cli, Shell};

/// Writes the completion script for `shell`.
pub fn write(shell: Shell, out: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    // Generated in memory: clap_complete panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut cmd, "spacetime", &mut script);
    if let Shell::Bash = shell {
        script.extend(bash_extra(&cmd).as_bytes());
    }
    out.write_all(&script)
}

/// The options of `sub` that take a value, space-separated and space-framed (`" -o --json "`).
fn value_options(cmd: &clap::Command, sub: &str) -> String {
    let mut words = vec![String::new()];
    if let Some(sub) = cmd.find_subcommand(sub) {
        for arg in sub
            .get_arguments()
            .filter(|a| a.get_action().takes_values())
        {
            if let Some(s) = arg.get_short() {
                words.push(format!("-{s}"));
            }
            if let Some(l) = arg.get_long() {
                words.push(format!("--{l}"));
            }
        }
    }
    words.push(String::new());
    words.join(" ")
}

/// A function run before clap's `_spacetime`, registered in its place: it answers where
/// clap's would offer options again or files, and hands every other word to clap's.
fn bash_extra(cmd: &clap::Command) -> String {
    let events = crate::cmd::watch::args::EVENT_NAMES.join(" ");
    let takes = value_options(cmd, "trace");
    format!(
        r#"
# spacetime's own: the command trace runs, pids, watch's events.
_spacetime_list() {{
    # Completes the last item of a comma-separated list in $cur among the words $1, less
    # those the list has already.
    local head="" item="$cur"
    if [[ $cur == *,* ]]; then
        head="${{cur%,*}},"
        item="${{cur##*,}}"
    fi
    local w
    COMPREPLY=()
    for w in $(compgen -W "$1" -- "$item"); do
        [[ ",$head" == *",$w,"* ]] || COMPREPLY+=("$head$w")
    done
}}

_spacetime_pids() {{
    local p pids=""
    for p in /proc/[0-9]*; do
        pids+=" ${{p#/proc/}}"
    done
    _spacetime_list "$pids"
}}

_spacetime_with_commands() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local i sub="" at=0 start=0
    # The subcommand: the first word after spacetime that is not an option (the global
    # options take no value).
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ ${{COMP_WORDS[i]}} != -* ]]; then
            sub="${{COMP_WORDS[i]}}"
            at=$i
            break
        fi
    done
    if [[ $sub == trace ]]; then
        # Where CMD starts: after `--`, or at the first word that is neither an option nor
        # an option's value (the word being completed too, once it has a letter: an empty
        # one still gets trace's options).
        local takes="{takes}"
        for ((i = at + 1; i <= COMP_CWORD; i++)); do
            local w="${{COMP_WORDS[i]}}"
            if ((i == COMP_CWORD)); then
                [[ -n $w && $w != -* ]] && start=$i
                break
            elif [[ $w == -- ]]; then
                start=$((i + 1))
                break
            elif [[ $w == -* ]]; then
                [[ $takes == *" $w "* ]] && ((i++))
            else
                start=$i
                break
            fi
        done
        if ((start > 0)); then
            if declare -F _command_offset >/dev/null; then
                # bash-completion's: the command's name, then its own completion.
                _command_offset "$start"
            elif ((COMP_CWORD == start)); then
                COMPREPLY=($(compgen -c -- "$cur"))
            else
                compopt -o filenames 2>/dev/null
                COMPREPLY=($(compgen -f -- "$cur"))
            fi
            return 0
        fi
        if [[ $prev == -p || $prev == --pid ]]; then
            _spacetime_pids
            return 0
        fi
    elif [[ $sub == watch ]]; then
        case "$prev" in
            --pid-tree)
                _spacetime_pids
                return 0
                ;;
            --events)
                _spacetime_list "{events}"
                return 0
                ;;
        esac
    fi
    _spacetime "$@"
}}

if [[ "${{BASH_VERSINFO[0]}}" -eq 4 && "${{BASH_VERSINFO[1]}}" -ge 4 || "${{BASH_VERSINFO[0]}}" -gt 4 ]]; then
    complete -F _spacetime_with_commands -o nosort -o bashdefault -o default spacetime
else
    complete -F _spacetime_with_commands -o bashdefault -o default spacetime
fi
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_options_that_take_values_are_known() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let takes = value_options(&cmd, "trace");
        for o in [" -o ", " --output ", " -p ", " --json ", " -f "] {
            assert!(takes.contains(o), "{o} in {takes}");
        }
        for flag in [" -q ", " --wide ", " -a ", " --verbose "] {
            assert!(!takes.contains(flag), "{flag} in {takes}");
        }
    }
}
