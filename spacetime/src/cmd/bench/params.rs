//! Parameters, as hyperfine has them: `-P VAR MIN MAX` (with `-D DELTA`) scans a numeric
//! range, `-L VAR V1,V2,…` (repeatable: every combination) lists values; `{VAR}` in a command,
//! its name, and the setup, prepare, conclude and cleanup commands is replaced by the value.

/// One benchmark's parameter values, in the order the parameters were given.
pub type Values = Vec<(String, String)>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamError {
    #[error("error while parsing parameter scan arguments ({0})")]
    Parse(String),
    #[error("empty parameter range")]
    EmptyRange,
    #[error("parameter range is too large")]
    TooLarge,
    #[error("zero is not a valid parameter step")]
    ZeroStep,
    #[error(
        "a step size is required when the range bounds are not integers: give it with \
         -D/--parameter-step-size DELTA"
    )]
    StepRequired,
    #[error("duplicate parameter names: {0}")]
    Duplicate(String),
}

/// Most values a scan may take (hyperfine's bound).
const MAX_VALUES: i128 = 100_000;

/// A decimal as an integer count of 10^-scale: exact steps, printed as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    units: i128,
    scale: u32,
}

impl Decimal {
    fn parse(s: &str) -> Result<Decimal, ParamError> {
        let bad = || ParamError::Parse(format!("{s:?} is not a number"));
        let t = s.trim();
        let (neg, digits) = match t.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
            || int.len() + frac.len() > 30
        {
            return Err(bad());
        }
        let units: i128 = format!("{int}{frac}").parse().map_err(|_| bad())?;
        Ok(Decimal {
            units: if neg { -units } else { units },
            scale: frac.len() as u32,
        })
    }

    fn rescale(self, scale: u32) -> i128 {
        self.units * 10i128.pow(scale - self.scale)
    }

    fn show(units: i128, scale: u32) -> String {
        if scale == 0 {
            return units.to_string();
        }
        let p = 10i128.pow(scale);
        let sign = if units < 0 { "-" } else { "" };
        let a = units.abs();
        format!("{sign}{}.{:0w$}", a / p, a % p, w = scale as usize)
    }
}

/// The values of `-P VAR MIN MAX [-D DELTA]`: integers step 1 by default; decimals need a
/// step, and print with the finer of the bounds' and the step's decimals after the first.
pub fn scan(min: &str, max: &str, step: Option<&str>) -> Result<Vec<String>, ParamError> {
    let (lo, hi) = (Decimal::parse(min)?, Decimal::parse(max)?);
    let st = match step {
        Some(s) => Decimal::parse(s)?,
        None if lo.scale == 0 && hi.scale == 0 => Decimal { units: 1, scale: 0 },
        None => return Err(ParamError::StepRequired),
    };
    let scale = lo.scale.max(hi.scale).max(st.scale);
    let (a, b, d) = (lo.rescale(scale), hi.rescale(scale), st.rescale(scale));
    if b < a {
        return Err(ParamError::EmptyRange);
    }
    if d == 0 {
        return Err(ParamError::ZeroStep);
    }
    if d < 0 || (b - a) / d + 1 > MAX_VALUES {
        return Err(ParamError::TooLarge);
    }
    let mut out = Vec::new();
    let mut v = a;
    while v <= b {
        // The first value as MIN was written; the next ones carry the step's decimals.
        let s = if v == a { lo.scale } else { scale };
        out.push(Decimal::show(v / 10i128.pow(scale - s), s));
        v += d;
    }
    Ok(out)
}

/// `-L`'s comma-separated values: `\,` is a comma inside a value, `\\` a backslash.
pub fn tokenize(values: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = values.chars();
    while let Some(c) = chars.next() {
        let cur = out.last_mut().expect("one value");
        match c {
            '\\' => match chars.next() {
                Some(n @ (',' | '\\')) => cur.push(n),
                Some(n) => {
                    cur.push('\\');
                    cur.push(n);
                }
                None => cur.push('\\'),
            },
            ',' => out.push(String::new()),
            c => cur.push(c),
        }
    }
    out
}

/// Every combination of the lists, in hyperfine's order: the first list's values vary
/// fastest, the last list's slowest.
pub fn combinations(lists: &[(String, Vec<String>)]) -> Result<Vec<Values>, ParamError> {
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for (n, _) in lists {
        *seen.entry(n).or_default() += 1;
    }
    let dup: Vec<&str> = seen
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(n, _)| *n)
        .collect();
    if !dup.is_empty() {
        return Err(ParamError::Duplicate(dup.join(", ")));
    }
    let mut all: Vec<Values> = vec![Vec::new()];
    for (name, values) in lists {
        all = values
            .iter()
            .flat_map(|v| {
                all.iter().map(move |pre| {
                    let mut p = pre.clone();
                    p.push((name.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    Ok(all)
}

/// `text` with every `{NAME}` replaced by its value, left to right, a replaced value never
/// scanned again (`-L a '{b}' -L b x 'echo {a} {b}'` runs `echo {b} x`).
pub fn substitute(text: &[u8], values: &Values) -> Vec<u8> {
    let keys: Vec<(Vec<u8>, &str)> = values
        .iter()
        .map(|(n, v)| (format!("{{{n}}}").into_bytes(), v.as_str()))
        .collect();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    'outer: while i < text.len() {
        for (k, v) in &keys {
            if text[i..].starts_with(k) {
                out.extend_from_slice(v.as_bytes());
                i += k.len();
                continue 'outer;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

/// The parameters `text` does not mention: shown beside the command so that benchmarks
/// that differ only in them can be told apart.
pub fn unused(text: &[u8], values: &Values) -> Values {
    values
        .iter()
        .filter(|(n, _)| {
            let k = format!("{{{n}}}");
            !text.windows(k.len()).any(|w| w == k.as_bytes())
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_and_decimal_scans() {
        assert_eq!(scan("1", "4", None).expect("ints"), ["1", "2", "3", "4"]);
        assert_eq!(
            scan("0", "10", Some("3")).expect("step"),
            ["0", "3", "6", "9"]
        );
        assert_eq!(
            scan("0.3", "0.7", Some("0.2")).expect("decimals"),
            ["0.3", "0.5", "0.7"]
        );
        // As hyperfine (rust_decimal): the first value as written, then the step's decimals.
        let v = scan("0", "1", Some("0.1")).expect("decimals");
        assert_eq!(v.len(), 11);
        assert_eq!(
            (v[0].as_str(), v[1].as_str(), v[10].as_str()),
            ("0", "0.1", "1.0")
        );
        assert_eq!(scan("-2", "-1", None).expect("negative"), ["-2", "-1"]);
        assert_eq!(scan("5", "1", None), Err(ParamError::EmptyRange));
        assert_eq!(scan("1", "5", Some("0")), Err(ParamError::ZeroStep));
        assert_eq!(scan("0", "100000", None), Err(ParamError::TooLarge));
        assert_eq!(scan("0.5", "1", None), Err(ParamError::StepRequired));
        assert!(matches!(scan("x", "1", None), Err(ParamError::Parse(_))));
    }

    #[test]
    fn lists_tokenize_like_hyperfine() {
        assert_eq!(tokenize(""), [""]);
        assert_eq!(tokenize("foo,bar,baz"), ["foo", "bar", "baz"]);
        assert_eq!(tokenize(r"hello\, world!,x"), ["hello, world!", "x"]);
        assert_eq!(tokenize(r"\n"), [r"\n"]);
        assert_eq!(tokenize(r"\\\,"), [r"\,"]);
        assert_eq!(tokenize(",,"), ["", "", ""]);
    }

    #[test]
    fn combinations_first_list_fastest() {
        let l = |n: &str, v: &[&str]| (n.to_string(), v.iter().map(|s| s.to_string()).collect());
        let c = combinations(&[l("a", &["1", "2"]), l("b", &["x", "y"])]).expect("ok");
        let flat: Vec<String> = c
            .iter()
            .map(|v| v.iter().map(|(_, x)| x.as_str()).collect())
            .collect();
        assert_eq!(flat, ["1x", "2x", "1y", "2y"]);
        assert_eq!(
            combinations(&[l("a", &["1"]), l("a", &["2"])]),
            Err(ParamError::Duplicate("a".into()))
        );
    }

    #[test]
    fn substitution_does_not_rescan_values() {
        let v: Values = vec![
            ("foo".into(), "{bar} baz".into()),
            ("bar".into(), "quux".into()),
        ];
        assert_eq!(substitute(b"echo {foo} {bar}", &v), b"echo {bar} baz quux");
        assert_eq!(
            substitute(b"make -j{j}", &vec![("j".into(), "4".into())]),
            b"make -j4"
        );
        assert_eq!(
            unused(b"echo {foo}", &v),
            vec![("bar".into(), "quux".into())]
        );
    }
}
