//! What the bench's pictures draw (the page and the SVG), taken from the bench's JSON as `bench --json` writes it: for
//! each command its runs' wall time, peak RSS and tree peak (every value, and the statistics
//! the bench computed), its parameters when it was one value of a parameter scan, and the
//! comparison. Keys the page does not know are ignored; a figure that is missing is left out.

use serde::Serialize;
use serde_json::Value;

/// One figure's statistics over a command's runs, as the bench computed them.
#[derive(Serialize, Default)]
pub(crate) struct RunStats {
    pub(crate) mean: Option<f64>,
    pub(crate) stddev: Option<f64>,
    pub(crate) median: Option<f64>,
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
    pub(crate) values: Vec<f64>,
}

impl RunStats {
    fn of(v: Option<&Value>) -> Option<RunStats> {
        let v = v.filter(|v| v.is_object())?;
        let num = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(RunStats {
            mean: num("mean"),
            stddev: num("stddev"),
            median: num("median"),
            min: num("min"),
            max: num("max"),
            values: v
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default(),
        })
    }
}

#[derive(Serialize)]
pub(crate) struct Result {
    pub(crate) command: String,
    /// `{"name": "value"}` of a parameter scan (empty without).
    pub(crate) parameters: serde_json::Map<String, Value>,
    pub(crate) runs: u64,
    pub(crate) wall: Option<RunStats>,
    pub(crate) user: Option<RunStats>,
    pub(crate) sys: Option<RunStats>,
    pub(crate) peak: Option<RunStats>,
    pub(crate) tree: Option<RunStats>,
    pub(crate) failed_runs: u64,
    /// Its colour in every picture ([`super::colour`]).
    pub(crate) colour: String,
}

#[derive(Serialize)]
pub struct BenchData {
    pub(crate) kind: &'static str,
    pub(crate) version: String,
    pub(crate) interrupted: bool,
    pub(crate) results: Vec<Result>,
    pub(crate) comparison: Value,
}

impl BenchData {
    pub fn of(v: &Value) -> BenchData {
        let results = v
            .get("results")
            .and_then(Value::as_array)
            .map(|a| a.iter().enumerate().map(|(k, r)| result(k, r)).collect())
            .unwrap_or_default();
        BenchData {
            kind: "bench",
            version: v
                .get("spacetime_version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            interrupted: v
                .get("interrupted")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            results,
            comparison: v.get("comparison").cloned().unwrap_or(Value::Null),
        }
    }
}

fn result(k: usize, r: &Value) -> Result {
    let fig = |k: &str| RunStats::of(r.get(k));
    let parameters = match r.get("parameters") {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    let exit_codes: Vec<i64> = r
        .get("exit_codes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    Result {
        command: r
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        parameters,
        runs: r.get("runs").and_then(Value::as_u64).unwrap_or(0),
        wall: fig("wall_ns"),
        user: fig("user_ns"),
        sys: fig("sys_ns"),
        peak: fig("peak_rss_bytes"),
        tree: fig("tree_peak_rss_bytes"),
        failed_runs: exit_codes.iter().filter(|&&c| c != 0).count() as u64,
        colour: super::colour(k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_is_there_and_tolerates_parameters_and_unknown_keys() {
        let v = serde_json::json!({
            "spacetime_version": "0.1.0", "interrupted": false, "new_key": 1,
            "results": [
                {"command": "sleep 0.1", "runs": 2, "exit_codes": [0, 1],
                 "parameters": {"t": "0.1"},
                 "wall_ns": {"mean": 1.5e8, "stddev": 1.0, "median": 1.5e8, "min": 1, "max": 2,
                             "values": [100000000, 200000000]},
                 "peak_rss_bytes": {"mean": 4096.0, "values": [4096, 4096]},
                 "tree_peak_rss_bytes": null}
            ],
            "comparison": null
        });
        let d = BenchData::of(&v);
        let j = serde_json::to_value(&d).expect("json");
        assert_eq!(j["results"][0]["parameters"]["t"], "0.1");
        assert_eq!(j["results"][0]["wall"]["values"][1], 2e8);
        assert_eq!(j["results"][0]["failed_runs"], 1);
        assert!(j["results"][0]["tree"].is_null());
        // Not a bench report at all: an empty page, not a panic.
        let empty = BenchData::of(&serde_json::json!([1, 2]));
        assert!(empty.results.is_empty());
    }
}
