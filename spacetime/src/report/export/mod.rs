//! Exports of a trace to other tools' formats.

pub(crate) mod perfetto;
pub(crate) mod protobuf;
