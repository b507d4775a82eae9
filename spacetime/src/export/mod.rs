//! Exports of a trace to other tools' formats.

pub mod perfetto;
pub mod protobuf;
