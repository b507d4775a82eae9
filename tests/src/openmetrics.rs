//! A strict parser for the OpenMetrics text format (the parts a Prometheus scrape checks):
//! metadata before samples, samples named after their family with the suffixes its type
//! allows, quoted and escaped label values, numeric values, families not interleaved,
//! cumulative histograms whose `+Inf` bucket equals `_count`, and the final `# EOF`.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Family {
    pub name: String,
    pub ty: String,
    pub unit: Option<String>,
    pub help: Option<String>,
    pub samples: Vec<Sample>,
}

impl Family {
    /// The value of the sample `name` whose labels include all of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

fn suffixes(ty: &str) -> &'static [&'static str] {
    match ty {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        "summary" => &["", "_count", "_sum", "_created"],
        "gaugehistogram" => &["_bucket", "_gcount", "_gsum"],
        "info" => &["_info"],
        "stateset" | "gauge" | "unknown" => &[""],
        _ => &[],
    }
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse().map_err(|_| format!("bad value {v:?}")),
    }
}

/// `{k="v",…}` → labels; returns the rest of the line.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("labels must start with {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let key = &rest[..eq];
        if !valid_name(key) {
            return Err(format!("bad label name {key:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value must be quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, '\\')) => value.push('\\'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key:?} repeated"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("labels must be separated by ,".into());
        }
    }
}

/// Parses and validates an exposition; returns its families in order.
pub fn parse_openmetrics(text: &str) -> Result<Vec<Family>, String> {
    if !text.ends_with("# EOF\n") && !text.ends_with("# EOF") {
        return Err("the exposition must end with # EOF".into());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut names = BTreeSet::new();
    let mut eof = false;
    for (n, line) in text.split('\n').enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if eof {
            if line.is_empty() {
                continue;
            }
            return Err(at("content after # EOF".into()));
        }
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            metadata(&mut families, &mut names, meta).map_err(at)?;
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            return Err(at("blank lines and comments are not allowed".into()));
        }
        sample(&mut families, line).map_err(at)?;
    }
    for f in &families {
        if f.ty == "histogram" {
            check_histogram(f)?;
        }
    }
    Ok(families)
}

/// One `# TYPE|UNIT|HELP name ...` line (without its `# `): opens a family or describes it.
fn metadata(
    families: &mut Vec<Family>,
    names: &mut BTreeSet<String>,
    meta: &str,
) -> Result<(), String> {
    let mut parts = meta.splitn(3, ' ');
    let (kind, name, rest) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next(),
    );
    if !valid_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let is_current = families.last().is_some_and(|f| f.name == name);
    if !is_current {
        if !names.insert(name.to_string()) {
            return Err(format!("family {name} is interleaved or repeated"));
        }
        families.push(Family {
            name: name.into(),
            ty: "unknown".into(),
            ..Family::default()
        });
    }
    let f = families.last_mut().expect("pushed");
    if !f.samples.is_empty() {
        return Err("metadata after samples".into());
    }
    let rest = rest.unwrap_or("");
    match kind {
        "TYPE" => {
            if suffixes(rest).is_empty() {
                return Err(format!("unknown type {rest:?}"));
            }
            f.ty = rest.into();
        }
        "UNIT" => {
            if !name.ends_with(&format!("_{rest}")) {
                return Err(format!("unit {rest} is not the name's suffix"));
            }
            f.unit = Some(rest.into());
        }
        "HELP" => f.help = Some(rest.into()),
        _ => return Err(format!("unknown metadata {kind:?}")),
    }
    Ok(())
}

/// One sample line, added to the current family it must belong to.
fn sample(families: &mut [Family], line: &str) -> Result<(), String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    let (labels, rest) = if line[name_end..].starts_with('{') {
        parse_labels(&line[name_end..])?
    } else {
        (BTreeMap::new(), &line[name_end..])
    };
    let mut fields = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ');
    let value = parse_value(fields.next().unwrap_or(""))?;
    if let Some(ts) = fields.next() {
        parse_value(ts)?;
    }
    let f = families
        .last_mut()
        .filter(|f| {
            suffixes(&f.ty)
                .iter()
                .any(|s| name.strip_suffix(s) == Some(f.name.as_str()))
        })
        .ok_or_else(|| format!("sample {name} does not belong to the current family"))?;
    if f.ty == "counter" && value < 0.0 {
        return Err("negative counter".into());
    }
    f.samples.push(Sample {
        name: name.into(),
        labels,
        value,
    });
    Ok(())
}

/// Each series of a histogram (its labels but `le`) has sorted, cumulative buckets ending at
/// +Inf, and a `_count` equal to its +Inf bucket.
fn check_histogram(f: &Family) -> Result<(), String> {
    let mut series: BTreeMap<Vec<(&String, &String)>, Vec<&Sample>> = BTreeMap::new();
    for s in f.samples.iter().filter(|s| s.name.ends_with("_bucket")) {
        let key = s.labels.iter().filter(|(k, _)| *k != "le").collect();
        series.entry(key).or_default().push(s);
    }
    for (labels, buckets) in &series {
        let mut prev = 0.0;
        let mut prev_le = f64::NEG_INFINITY;
        for b in buckets {
            let le = b
                .labels
                .get("le")
                .ok_or_else(|| format!("{}: bucket without le", f.name))?;
            let le = parse_value(le)?;
            if le <= prev_le || b.value < prev {
                return Err(format!(
                    "{}{labels:?}: buckets not sorted and cumulative",
                    f.name
                ));
            }
            (prev, prev_le) = (b.value, le);
        }
        if prev_le != f64::INFINITY {
            return Err(format!("{}{labels:?}: no +Inf bucket", f.name));
        }
        let want: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let count = f.value(&format!("{}_count", f.name), &want);
        if count != Some(prev) {
            return Err(format!(
                "{}{labels:?}: _count {count:?} differs from the +Inf bucket {prev}",
                f.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_valid_exposition() {
        let text = "# TYPE a counter\n# HELP a Things.\na_total{x=\"q\\\"\\\\\"} 3\n\
                    # TYPE h_seconds histogram\n# UNIT h_seconds seconds\n\
                    h_seconds_bucket{le=\"0.1\"} 1\nh_seconds_bucket{le=\"+Inf\"} 2\n\
                    h_seconds_count 2\nh_seconds_sum 0.5\n# EOF\n";
        let f = parse_openmetrics(text).expect("valid");
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].value("a_total", &[("x", "q\"\\")]), Some(3.0));
        // Two series of one histogram: each is cumulative on its own.
        let two = "# TYPE h histogram\n\
                   h_bucket{c=\"a\",le=\"1\"} 1\nh_bucket{c=\"a\",le=\"+Inf\"} 3\n\
                   h_count{c=\"a\"} 3\nh_sum{c=\"a\"} 2\n\
                   h_bucket{c=\"b\",le=\"1\"} 0\nh_bucket{c=\"b\",le=\"+Inf\"} 1\n\
                   h_count{c=\"b\"} 1\nh_sum{c=\"b\"} 4\n# EOF\n";
        parse_openmetrics(two).expect("two series");
    }

    #[test]
    fn rejects_invalid_ones() {
        for bad in [
            "# TYPE a counter\na_total 1\n",
            "# TYPE a counter\na 1\n# EOF\n",
            "# TYPE a gauge\na{x=y} 1\n# EOF\n",
            "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\n# EOF\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n# EOF\n",
            "# TYPE h histogram\nh_bucket{c=\"a\",le=\"+Inf\"} 1\nh_count{c=\"a\"} 2\n# EOF\n",
            "# TYPE a gauge\n\na 1\n# EOF\n",
        ] {
            assert!(parse_openmetrics(bad).is_err(), "accepted {bad:?}");
        }
    }
}
