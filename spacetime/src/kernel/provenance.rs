//! Whose kernel programs traced a run.

use serde::{Deserialize, Serialize};

/// Whose programs traced: loaded here, or an agent's. Serialized as `"own"` / `"agent"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provenance {
    Own,
    Agent,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Own => "own",
            Provenance::Agent => "agent",
        }
    }
}
