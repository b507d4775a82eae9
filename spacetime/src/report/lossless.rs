//! Bytes from traced processes in JSON, kept exact. argv elements and paths are bytes to the
//! kernel; JSON strings are Unicode. A string is exact when the bytes are valid UTF-8; when
//! any are not, the image also carries `argv_b64` / `exe_b64`: each element's exact bytes in
//! standard base64, so nothing is lost to U+FFFD.

use base64::{engine::general_purpose::STANDARD, Engine};
use serde::ser::{Serialize, SerializeSeq, Serializer};

/// Bytes as a JSON string: exact when valid UTF-8, U+FFFD for invalid bytes otherwise.
pub struct Lossy<'a>(pub &'a [u8]);

impl Serialize for Lossy<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(self.0))
    }
}

/// Bytes as standard base64.
pub struct B64<'a>(pub &'a [u8]);

impl Serialize for B64<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(self.0))
    }
}

/// Arguments as an array of strings ([`Lossy`]).
pub struct Argv<I>(pub I);

impl<'a, I: Iterator<Item = &'a [u8]> + Clone> Serialize for Argv<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for a in self.0.clone() {
            seq.serialize_element(&Lossy(a))?;
        }
        seq.end()
    }
}

/// Arguments as an array of base64 strings ([`B64`]).
pub struct ArgvB64<I>(pub I);

impl<'a, I: Iterator<Item = &'a [u8]> + Clone> Serialize for ArgvB64<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for a in self.0.clone() {
            seq.serialize_element(&B64(a))?;
        }
        seq.end()
    }
}

/// An owned argument list (the command spacetime ran): `argv` in JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args(pub Vec<Vec<u8>>);

impl Args {
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.0.iter().map(Vec::as_slice)
    }

    /// The base64 form, present only when some argument is not UTF-8.
    pub fn b64(&self) -> Option<Args> {
        self.iter().any(|a| !is_text(a)).then(|| self.clone())
    }

    /// The arguments joined by spaces, invalid UTF-8 shown as U+FFFD (for titles).
    pub fn lossy_line(&self) -> String {
        String::from_utf8_lossy(&self.0.join(&b' ')).into_owned()
    }
}

impl Serialize for Args {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Argv(self.iter()).serialize(s)
    }
}

/// [`Args`] as base64 strings.
pub fn serialize_b64<S: Serializer>(a: &Option<Args>, s: S) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => ArgvB64(a.iter()).serialize(s),
        None => s.serialize_none(),
    }
}

pub fn is_text(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok()
}

/// `argv_b64`, present only when some argument is not UTF-8.
pub fn argv_b64<'a, I: Iterator<Item = &'a [u8]> + Clone>(argv: I) -> Option<ArgvB64<I>> {
    argv.clone().any(|a| !is_text(a)).then_some(ArgvB64(argv))
}

/// `exe_b64`, present only when the path is not UTF-8.
pub fn exe_b64(exe: &[u8]) -> Option<B64<'_>> {
    (!is_text(exe)).then_some(B64(exe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_when_text_base64_when_not() {
        let args: Vec<&[u8]> = vec![b"ok", b"\xff\x1b"];
        let json = serde_json::to_string(&Argv(args.iter().copied())).expect("json");
        assert_eq!(json, "[\"ok\",\"\u{fffd}\\u001b\"]");
        let b = argv_b64(args.iter().copied()).expect("not UTF-8");
        assert_eq!(
            serde_json::to_string(&b).expect("json"),
            r#"["b2s=","/xs="]"#
        );
        assert!(argv_b64([b"a".as_slice()].into_iter()).is_none());
        assert!(exe_b64(b"/bin/ls").is_none());
        assert_eq!(
            serde_json::to_string(&exe_b64(b"/tmp/\x80").expect("b64")).expect("json"),
            r#""L3RtcC+A""#
        );
    }
}
