//! The figures the report derives from the kernel's taskstats sums, each declared once in
//! [`FIGURES`]: its key, unit, meaning, source, how it sums over processes, where the JSON
//! writes it (each process, each program, the tree), its `-f` letter, whether `diff` compares
//! it. The JSON (and the null's reason beside it), `-f`, `diff`, the page, docs/json.md's
//! table and the schema's entries (both checked by this module's tests) all follow from the
//! declaration; no renderer names a figure of the table.

use serde::{ser::SerializeMap, Serialize, Serializer};

use super::{ProcessReport, Report};
use crate::model::crosscheck::ProcessTaskstats;

/// A figure's unit: how it is spelled, printed and compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// `_bytes`; a `-f` letter prints KiB, as GNU time's memory letters do.
    Bytes,
    /// A count (faults, switches, 512-byte blocks).
    Count,
}

impl Unit {
    /// The key's suffix that names the unit.
    fn suffix(self) -> &'static str {
        match self {
            Unit::Bytes => "_bytes",
            Unit::Count => "",
        }
    }
}

/// How a figure is made of the processes' taskstats sums.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    /// Each process's share, summed.
    Sum(fn(&ProcessTaskstats) -> u64),
    /// `num × scale / den`, both summed over the processes (a mean weighted by `den`): a
    /// process without `num` (an older report) counts in neither.
    Ratio {
        num: fn(&ProcessTaskstats) -> Option<u64>,
        den: fn(&ProcessTaskstats) -> u64,
        scale: u64,
    },
}

/// Where the JSON writes a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// `processes[]`.
    Process,
    /// `by_program[]`: the processes a program was the last program of (as its CPU).
    Program,
    /// `totals`.
    Tree,
}

/// One figure, declared once.
#[derive(Debug)]
pub struct Figure {
    /// The JSON key, its unit last (`_bytes`).
    pub key: &'static str,
    /// What people read (the page, `diff`).
    pub title: &'static str,
    pub unit: Unit,
    /// What it means (docs/json.md, the schema's description).
    pub meaning: &'static str,
    /// Where it comes from.
    pub source: &'static str,
    /// The independent truth its test compares it with.
    pub checked: &'static str,
    pub value: Value,
    /// Where the JSON writes it (none: only its letter shows it; its parts are in each
    /// process's `taskstats`).
    pub places: &'static [Place],
    /// Its `-f` letter (the tree's figure).
    pub letter: Option<char>,
    /// `diff` compares it (the tree's, then each program's).
    pub diff: bool,
}

const MIB: u64 = 1 << 20;

/// Every figure of the table. GNU time's letters among them print what they printed before.
pub const FIGURES: &[Figure] = &[
    Figure {
        key: "mean_rss_on_cpu_bytes",
        title: "mean RSS on CPU",
        unit: Unit::Bytes,
        meaning: "The memory held while running, beside the peak: the RSS the kernel integrated \
                  over the CPU time (taskstats `coremem`, at each tick) divided by that CPU time; \
                  per program and for the tree, the integrals summed over the CPU times summed. \
                  Null, with the reason beside it, when no taskstats record confirmed an exit or \
                  no CPU time was counted.",
        source: "taskstats `coremem` ÷ (`ac_utime` + `ac_stime`), the threads' records summed",
        checked:
            "a process holding 96 MiB (its own `VmRSS`) while it burns 1 s of CPU: within 10 %",
        value: Value::Ratio {
            num: |t| t.coremem_mib_us,
            den: |t| t.utime_us + t.stime_us,
            scale: MIB,
        },
        places: &[Place::Process, Place::Program, Place::Tree],
        letter: Some('A'),
        diff: true,
    },
    letter_only("major_faults", 'F', |t| t.majflt),
    letter_only("minor_faults", 'R', |t| t.minflt),
    // 512-byte blocks of storage I/O, as getrusage's ru_inblock and ru_oublock count it.
    letter_only("fs_input_blocks", 'I', |t| t.read_bytes / 512),
    letter_only("fs_output_blocks", 'O', |t| {
        t.write_bytes.saturating_sub(t.cancelled_write_bytes) / 512
    }),
    letter_only("involuntary_switches", 'c', |t| t.nivcsw),
    letter_only("voluntary_switches", 'w', |t| t.nvcsw),
];

/// A count GNU time prints under its letter, summed over the confirmed processes.
const fn letter_only(key: &'static str, l: char, f: fn(&ProcessTaskstats) -> u64) -> Figure {
    Figure {
        key,
        title: key,
        unit: Unit::Count,
        meaning: "",
        source: "taskstats, the confirmed processes summed",
        checked: "",
        value: Value::Sum(f),
        places: &[],
        letter: Some(l),
        diff: false,
    }
}

/// Why a figure is null.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// The run had no taskstats listener.
    NoTaskstats,
    /// No taskstats record confirmed an exit of these processes.
    NotConfirmed,
    /// The records counted no CPU time (less than a tick).
    NoCpu,
    /// The report was written before this figure's parts were kept.
    NotKept,
}

impl Unknown {
    pub fn sentence(self) -> &'static str {
        match self {
            Unknown::NoTaskstats => "taskstats unavailable",
            Unknown::NotConfirmed => "no taskstats record confirmed an exit",
            Unknown::NoCpu => "taskstats counted no CPU time (less than a tick)",
            Unknown::NotKept => "not in this report (written before it was kept)",
        }
    }
}

impl Figure {
    /// The key of the reason beside a null: `…_bytes` gives `…_unknown_reason`.
    pub fn reason_key(&self) -> String {
        let stem = self
            .key
            .strip_suffix(self.unit.suffix())
            .unwrap_or(self.key);
        format!("{stem}_unknown_reason")
    }

    pub fn at(&self, place: Place) -> bool {
        self.places.contains(&place)
    }

    /// The figure with `-f` letter `l`.
    pub fn by_letter(l: char) -> Option<&'static Figure> {
        FIGURES.iter().find(|f| f.letter == Some(l))
    }
}

/// One figure's parts summed over some processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Acc {
    num: u128,
    den: u128,
    /// Processes with taskstats sums, and those of them without `num`.
    confirmed: u64,
    lacking: u64,
}

/// Every figure of the table summed over some processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sums([Acc; FIGURES.len()]);

impl Sums {
    /// Adds one process's taskstats sums (None: its exit was not confirmed).
    pub fn add(&mut self, t: Option<&ProcessTaskstats>) {
        let Some(t) = t else { return };
        for (f, a) in FIGURES.iter().zip(&mut self.0) {
            a.confirmed += 1;
            match f.value {
                Value::Sum(get) => a.num += u128::from(get(t)),
                Value::Ratio { num, den, .. } => match num(t) {
                    Some(n) => {
                        a.num += u128::from(n);
                        a.den += u128::from(den(t));
                    }
                    None => a.lacking += 1,
                },
            }
        }
    }

    /// The figures of these processes.
    pub fn over<'p, 'a: 'p>(procs: impl IntoIterator<Item = &'p ProcessReport<'a>>) -> Sums {
        let mut s = Sums::default();
        for p in procs {
            s.add(p.taskstats().as_ref());
        }
        s
    }

    /// The `i`th figure's value.
    fn get(&self, i: usize) -> Result<u64, Unknown> {
        let a = &self.0[i];
        match FIGURES[i].value {
            Value::Sum(_) => Ok(a.num.min(u128::from(u64::MAX)) as u64),
            Value::Ratio { scale, .. } => {
                if a.confirmed == 0 {
                    Err(Unknown::NotConfirmed)
                } else if a.lacking == a.confirmed {
                    Err(Unknown::NotKept)
                } else {
                    let v = (a.num.saturating_mul(u128::from(scale))).checked_div(a.den);
                    v.map(|v| v.min(u128::from(u64::MAX)) as u64)
                        .ok_or(Unknown::NoCpu)
                }
            }
        }
    }

    /// Figure `f`'s value.
    pub fn value(&self, f: &Figure) -> Result<u64, Unknown> {
        // By key: a const's entries may be copies, their addresses not one.
        let i = FIGURES
            .iter()
            .position(|g| g.key == f.key)
            .unwrap_or_default();
        self.get(i)
    }

    /// The figures written at `place`, with their values.
    pub fn at(
        &self,
        place: Place,
    ) -> impl Iterator<Item = (&'static Figure, Result<u64, Unknown>)> + '_ {
        FIGURES
            .iter()
            .enumerate()
            .filter(move |(_, f)| f.at(place))
            .map(|(i, f)| (f, self.get(i)))
    }
}

/// The tree's figures: None without taskstats (`?` under a letter).
pub fn tree(r: &Report) -> Result<Sums, Unknown> {
    if !r.taskstats.available {
        return Err(Unknown::NoTaskstats);
    }
    Ok(Sums::over(&r.processes))
}

/// The tree's value of figure `f`.
pub fn tree_value(r: &Report, f: &Figure) -> Result<u64, Unknown> {
    tree(r)?.value(f)
}

/// A place's figures as JSON keys: the value, and the reason beside a null.
pub struct Json {
    pub sums: Result<Sums, Unknown>,
    pub place: Place,
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for f in FIGURES.iter().filter(|f| f.at(self.place)) {
            let v = match &self.sums {
                Ok(sums) => sums.value(f),
                Err(e) => Err(*e),
            };
            m.serialize_entry(f.key, &v.ok())?;
            if let Err(why) = v {
                m.serialize_entry(&f.reason_key(), why.sentence())?;
            }
        }
        m.end()
    }
}

/// An object's own keys, then its place's figures.
#[derive(Serialize)]
pub struct With<'r, T: Serialize> {
    #[serde(flatten)]
    pub inner: &'r T,
    #[serde(flatten)]
    pub figures: Json,
}

/// The figures as the page shows them: each figure's title and unit, the tree's value (or
/// why there is none), and per process and per program one value each, in the table's order.
#[derive(Serialize)]
pub struct Page {
    pub key: &'static str,
    pub title: &'static str,
    pub bytes: bool,
    pub tree: Option<u64>,
    pub tree_note: Option<&'static str>,
    pub processes: Vec<Option<u64>>,
    pub programs: Vec<Option<u64>>,
}

impl Page {
    /// One entry per figure the JSON writes per process, per program and for the tree.
    pub fn of(r: &Report) -> Vec<Page> {
        let tree = tree(r);
        FIGURES
            .iter()
            .filter(|f| f.at(Place::Tree))
            .map(|f| {
                let t = tree.as_ref().map_err(|e| *e).and_then(|s| s.value(f));
                Page {
                    key: f.key,
                    title: f.title,
                    bytes: f.unit == Unit::Bytes,
                    tree: t.ok(),
                    tree_note: t.err().map(Unknown::sentence),
                    processes: r
                        .processes
                        .iter()
                        .map(|p| Sums::over([p]).value(f).ok())
                        .collect(),
                    programs: r
                        .analysis
                        .programs
                        .iter()
                        .map(|g| g.figures.value(f).ok())
                        .collect(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "figures_tests.rs"]
mod tests;
