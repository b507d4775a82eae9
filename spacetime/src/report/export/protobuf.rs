//! Just enough protobuf to write Perfetto traces (and to read them back in tests): varints,
//! strings and nested messages.

/// A message being encoded; fields are appended in the order given.
#[derive(Clone, Debug, Default)]
pub struct Msg(Vec<u8>);

const VARINT: u8 = 0;
const LEN: u8 = 2;

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Msg {
    pub fn new() -> Msg {
        Msg::default()
    }

    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.0, ((field as u64) << 3) | wire as u64);
    }

    pub fn uint(mut self, field: u32, v: u64) -> Msg {
        self.key(field, VARINT);
        put_varint(&mut self.0, v);
        self
    }

    /// An int64/int32 field (two's complement, not zigzag).
    pub fn int(self, field: u32, v: i64) -> Msg {
        self.uint(field, v as u64)
    }

    /// A double field (wire type 1: eight bytes, little-endian).
    pub fn double(mut self, field: u32, v: f64) -> Msg {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn boolean(self, field: u32, v: bool) -> Msg {
        self.uint(field, v as u64)
    }

    pub fn bytes(mut self, field: u32, b: &[u8]) -> Msg {
        self.key(field, LEN);
        put_varint(&mut self.0, b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    pub fn string(self, field: u32, s: &str) -> Msg {
        self.bytes(field, s.as_bytes())
    }

    pub fn msg(self, field: u32, m: Msg) -> Msg {
        self.bytes(field, &m.0)
    }

    /// Appends another message's fields.
    pub fn merge(mut self, other: Msg) -> Msg {
        self.0.extend_from_slice(&other.0);
        self
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

#[cfg(test)]
/// A decoded field value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

#[cfg(test)]
impl<'a> Value<'a> {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Varint(v) | Value::Fixed64(v) => Some(v),
            Value::Fixed32(v) => Some(v as u64),
            Value::Len(_) => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::Len(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.as_bytes()?).ok()
    }
}

#[cfg(test)]
fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
/// Splits a message into its fields; None when it is malformed.
pub fn fields(buf: &[u8]) -> Option<Vec<(u32, Value<'_>)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = get_varint(buf, &mut pos)?;
        let field = u32::try_from(key >> 3).ok()?;
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(get_varint(buf, &mut pos)?),
            1 => {
                let b = buf.get(pos..pos + 8)?;
                pos += 8;
                Value::Fixed64(u64::from_le_bytes(b.try_into().ok()?))
            }
            LEN => {
                let n = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
                let b = buf.get(pos..pos.checked_add(n)?)?;
                pos += n;
                Value::Len(b)
            }
            5 => {
                let b = buf.get(pos..pos + 4)?;
                pos += 4;
                Value::Fixed32(u32::from_le_bytes(b.try_into().ok()?))
            }
            _ => return None,
        };
        out.push((field, value));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let inner = Msg::new().string(2, "héllo").boolean(3, true);
        let m = Msg::new()
            .uint(1, 300)
            .int(30, -5)
            .msg(60, inner)
            .into_bytes();
        // 300 = 0xac 0x02; field 1 varint key = 0x08.
        assert_eq!(&m[..3], [0x08, 0xac, 0x02]);
        let f = fields(&m).expect("well formed");
        assert_eq!(f[0], (1, Value::Varint(300)));
        assert_eq!(f[1].1.as_u64().map(|v| v as i64), Some(-5));
        assert_eq!(f[2].0, 60);
        let inner = fields(f[2].1.as_bytes().expect("message")).expect("inner");
        assert_eq!(inner[0].1.as_str(), Some("héllo"));
        assert_eq!(inner[1], (3, Value::Varint(1)));
        assert_eq!(fields(&[0x0a, 0x05, 0x01]), None, "truncated");
    }
}
