//! The benchmarks the options describe, as hyperfine expands them: the reference first, then
//! each command for each parameter value (the commands varying fastest), each with its name,
//! its hooks (setup, prepare, conclude, cleanup) and how it is run (a shell, or split).

use std::{
    ffi::OsString,
    os::unix::ffi::{OsStrExt, OsStringExt},
};

use super::{
    args::BenchArgs,
    model::{BenchCommand, Hooks},
    params::{self, ParamError, Values},
};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("{0}: unterminated quote or trailing backslash (without a shell a command is split like a shell does)")]
    Unsplittable(String),
    #[error("{0}: empty command")]
    Empty(String),
    #[error("{option} is given {given} times: give it once, or once per benchmark ({benchmarks}, the reference included)")]
    Count {
        option: &'static str,
        given: usize,
        benchmarks: usize,
    },
    #[error("{given} --command-name for {commands} commands: at most one per command")]
    TooManyNames { given: usize, commands: usize },
    #[error(
        "--command-name is given {given} times: give it once, or once per benchmark ({benchmarks})"
    )]
    NameCount { given: usize, benchmarks: usize },
    #[error("conflicting numbers of runs: --min-runs is larger than --max-runs")]
    EmptyRunsRange,
    #[error("--shell {0:?}: not a command line")]
    Shell(String),
    #[error("unknown --output {0:?}: use ./{0} for a file of that name")]
    UnknownOutput(String),
    #[error("--input {0}: no such file")]
    NoInput(String),
    #[error("{0}")]
    Param(#[from] ParamError),
}

/// How commands run: through a shell (its words, `-c`, the text) or split and exec'd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shell {
    Words(Vec<OsString>),
    None,
}

impl Shell {
    pub fn of(args: &BenchArgs) -> Result<Shell, PlanError> {
        match args.shell.as_deref() {
            _ if args.no_shell => Ok(Shell::None),
            None | Some("default") => Ok(Shell::Words(vec!["sh".into()])),
            Some("none") => Ok(Shell::None),
            Some(s) => match shlex::split(s) {
                Some(w) if w.first().is_some_and(|f| !f.is_empty()) => {
                    Ok(Shell::Words(w.into_iter().map(OsString::from).collect()))
                }
                _ => Err(PlanError::Shell(s.into())),
            },
        }
    }

    /// The argv that runs `text`.
    pub fn argv(&self, text: &[u8]) -> Result<Vec<OsString>, PlanError> {
        let shown = || crate::util::term::escape(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(PlanError::Empty(shown()));
        }
        Ok(match self {
            Shell::Words(w) => {
                let mut a = w.clone();
                a.push("-c".into());
                a.push(OsString::from_vec(text.to_vec()));
                a
            }
            Shell::None => shlex::bytes::split(text)
                .ok_or_else(|| PlanError::Unsplittable(shown()))?
                .into_iter()
                .map(OsString::from_vec)
                .collect(),
        })
    }

    /// The shell's own start-up, to measure: `SHELL -c ""`.
    pub fn empty(&self) -> Option<Vec<OsString>> {
        match self {
            Shell::Words(w) => {
                let mut a = w.clone();
                a.extend(["-c".into(), OsString::new()]);
                Some(a)
            }
            Shell::None => None,
        }
    }
}

/// One benchmark before its argv: a template, its name and its parameter values.
struct Spec<'a> {
    template: &'a [u8],
    name: Option<&'a str>,
    values: Values,
}

/// Every benchmark, in order: the reference (if any), then the commands for each parameter
/// value.
pub fn plan<'a>(args: &'a BenchArgs, shell: &Shell) -> Result<Vec<BenchCommand>, PlanError> {
    let templates: Vec<&[u8]> = args.commands.iter().map(|c| c.as_bytes()).collect();
    let mut specs: Vec<Spec> = Vec::new();
    if let Some(r) = &args.reference {
        specs.push(Spec {
            template: r.as_bytes(),
            name: args.reference_name.as_deref(),
            values: Vec::new(),
        });
    }
    let sets = parameter_sets(args)?;
    let names = &args.command_name;
    let total = sets.len() * templates.len();
    let parametrized = sets.first().is_some_and(|v| !v.is_empty());
    // hyperfine's rules: one name per command, or with parameters one for all benchmarks or
    // one each.
    if parametrized && names.len() > 1 && names.len() != total {
        return Err(PlanError::NameCount {
            given: names.len(),
            benchmarks: total,
        });
    }
    if !parametrized && names.len() > templates.len() {
        return Err(PlanError::TooManyNames {
            given: names.len(),
            commands: templates.len(),
        });
    }
    for (k, values) in sets.into_iter().enumerate() {
        for (c, t) in templates.iter().enumerate() {
            let i = k * templates.len() + c;
            let name = match parametrized {
                true => names.get(i).or(names.first()),
                false => names.get(c),
            };
            specs.push(Spec {
                template: t,
                name: name.map(String::as_str),
                values: values.clone(),
            });
        }
    }
    let n = specs.len();
    let hook = |list: &'a [OsString], option| -> Result<Vec<Option<&'a [u8]>>, PlanError> {
        match list.len() {
            0 => Ok(vec![None; n]),
            1 => Ok(vec![Some(list[0].as_bytes()); n]),
            k if k == n => Ok(list.iter().map(|p| Some(p.as_bytes())).collect()),
            k => Err(PlanError::Count {
                option,
                given: k,
                benchmarks: n,
            }),
        }
    };
    let prepares = hook(&args.prepare, "--prepare")?;
    let concludes = hook(&args.conclude, "--conclude")?;
    let run = |t: Option<&[u8]>, v: &Values| -> Result<Option<Vec<OsString>>, PlanError> {
        t.map(|t| shell.argv(&params::substitute(t, v))).transpose()
    };
    specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let text = params::substitute(s.template, &s.values);
            Ok(BenchCommand {
                argv: shell.argv(&text)?,
                text,
                name: s.name.map(|n| {
                    String::from_utf8_lossy(&params::substitute(n.as_bytes(), &s.values))
                        .into_owned()
                }),
                unused: params::unused(s.template, &s.values),
                hooks: Hooks {
                    setup: run(args.setup.as_deref().map(OsStrExt::as_bytes), &s.values)?,
                    prepare: run(prepares[i], &s.values)?,
                    conclude: run(concludes[i], &s.values)?,
                    cleanup: run(args.cleanup.as_deref().map(OsStrExt::as_bytes), &s.values)?,
                },
                parameters: s.values,
            })
        })
        .collect()
}

/// The parameter values of each set of benchmarks: one empty set without parameters.
fn parameter_sets(args: &BenchArgs) -> Result<Vec<Values>, PlanError> {
    if let Some(p) = &args.parameter_scan {
        let (var, min, max) = (&p[0], &p[1], &p[2]);
        let values = params::scan(min, max, args.parameter_step_size.as_deref())?;
        return Ok(values.into_iter().map(|v| vec![(var.clone(), v)]).collect());
    }
    if !args.parameter_list.is_empty() {
        let lists: Vec<(String, Vec<String>)> = args
            .parameter_list
            .chunks_exact(2)
            .map(|l| (l[0].clone(), params::tokenize(&l[1])))
            .collect();
        return Ok(params::combinations(&lists)?);
    }
    Ok(vec![Vec::new()])
}

#[cfg(test)]
#[path = "commands_tests.rs"]
mod tests;
