//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`), just enough to resolve struct
//! member offsets, type sizes and enumerator values at startup.
//!
//! Format: Documentation/bpf/btf.rst. Parsing is one pass that records where each type record
//! starts and hashes the names of the types we look up by name (struct, union, enum, typedef), so
//! startup stays in the low milliseconds for ~130k types. Every read is bounds-checked: malformed
//! input yields a [`BtfError`], never a panic, and reference chains are bounded so a cyclic blob
//! cannot hang a lookup.

use std::path::Path;

/// Where the running kernel exposes its own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
/// Size of `struct btf_header` as of version 1; `hdr_len` may be larger (newer fields).
const HDR_MIN: usize = 24;
/// Size of `struct btf_type`.
const TYPE_HDR: usize = 12;
/// Longest typedef/qualifier chain or anonymous-member nesting we follow; real kernels use a few.
const MAX_DEPTH: u32 = 64;
/// Members examined per lookup before giving up: guards against blobs whose anonymous members
/// fan out exponentially. The live kernel needs a few hundred.
const MEMBER_BUDGET: u32 = 1 << 20;

/// Why BTF could not be read or a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not BTF: magic is {0:#06x}, expected 0xeb9f")]
    BadMagic(u16),
    #[error("BTF is in the opposite byte order to this machine")]
    WrongEndian,
    #[error("unsupported BTF version {0}")]
    BadVersion(u8),
    #[error("BTF is truncated or malformed: {0}")]
    Truncated(&'static str),
    #[error("BTF type {id} has unknown kind {kind}")]
    UnknownKind { id: u32, kind: u32 },
    #[error("BTF has no type id {0}")]
    BadTypeId(u32),
    #[error("BTF has no type named {0}")]
    NoSuchType(String),
    #[error("{ty} has no member {member}")]
    NoSuchMember { ty: String, member: String },
    #[error("{ty}.{member} is a bitfield; only byte-aligned members can be read")]
    Bitfield { ty: String, member: String },
    #[error("{ty} is not a struct or union, so it has no member {member}")]
    NotComposite { ty: String, member: String },
    #[error("BTF type {0} has no size")]
    NoSize(u32),
    #[error("BTF has no enumerator named {0}")]
    NoSuchEnumerator(String),
    #[error("BTF type references loop or nest too deeply")]
    TooDeep,
}

pub type Result<T, E = BtfError> = std::result::Result<T, E>;

/// BTF type kinds (`BTF_KIND_*`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Int = 1,
    Ptr,
    Array,
    Struct,
    Union,
    Enum,
    Fwd,
    Typedef,
    Volatile,
    Const,
    Restrict,
    Func,
    FuncProto,
    Var,
    Datasec,
    Float,
    DeclTag,
    TypeTag,
    Enum64,
}

impl Kind {
    fn from_raw(k: u32) -> Option<Kind> {
        use Kind::*;
        // In BTF_KIND_* order, starting at 1.
        const KINDS: [Kind; 19] = [
            Int, Ptr, Array, Struct, Union, Enum, Fwd, Typedef, Volatile, Const, Restrict, Func,
            FuncProto, Var, Datasec, Float, DeclTag, TypeTag, Enum64,
        ];
        KINDS.get((k as usize).wrapping_sub(1)).copied()
    }

    /// Bytes of kind-specific data after the `btf_type` record.
    fn extra_len(self, vlen: usize) -> usize {
        use Kind::*;
        match self {
            Int | Var | DeclTag => 4,
            Array => 12,
            Struct | Union | Enum64 | Datasec => 12 * vlen,
            Enum | FuncProto => 8 * vlen,
            Ptr | Fwd | Typedef | Volatile | Const | Restrict | Func | Float | TypeTag => 0,
        }
    }

    /// Kinds that only qualify or rename another type, followed when descending into members.
    fn is_modifier(self) -> bool {
        matches!(
            self,
            Kind::Typedef | Kind::Volatile | Kind::Const | Kind::Restrict | Kind::TypeTag
        )
    }

    /// Kinds findable by name (see [`Btf::parse`]).
    fn is_indexed(self) -> bool {
        matches!(
            self,
            Kind::Struct | Kind::Union | Kind::Enum | Kind::Enum64 | Kind::Typedef
        )
    }
}

/// What a struct member is, after following typedefs and qualifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberType<'a> {
    /// Byte offset from the start of the outer struct.
    pub offset: u32,
    /// Kind of the member's type (typedefs and qualifiers followed).
    pub kind: Kind,
    /// Name of that type, "" when anonymous. For arrays, the name of the element type.
    pub name: &'a str,
    /// For arrays, the element's kind; otherwise the same as `kind`.
    pub elem_kind: Kind,
    /// For arrays, the element count; otherwise 0.
    pub array_len: u32,
    /// Size in bytes of one element (of the whole type when not an array).
    pub elem_size: u32,
}

/// One decoded `struct btf_type` header.
#[derive(Copy, Clone)]
struct Ty {
    /// Position of the record in `data`.
    pos: usize,
    name_off: u32,
    kind: Kind,
    kflag: bool,
    vlen: usize,
    size_or_type: u32,
}

/// A member found by a path lookup, before the bitfield check.
struct Found {
    bit_off: u64,
    bitfield_size: u32,
    type_id: u32,
}

/// The raw blob: read into the heap, or the kernel's own mapped (see `mapped`).
enum Blob {
    Heap(Vec<u8>),
    Mapped(mapped::Mapped),
}

impl std::ops::Deref for Blob {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Blob::Heap(v) => v,
            Blob::Mapped(m) => m,
        }
    }
}

/// Parsed BTF. Holds the raw blob plus an index of where each type starts.
pub struct Btf {
    data: Blob,
    str_start: usize,
    str_end: usize,
    /// `type_pos[id]` = position of type `id` in `data`; index 0 (void) is unused.
    type_pos: Vec<u32>,
    /// (FNV-1a hash of name, id) of named struct/union/enum/typedef types, sorted.
    names: Vec<(u64, u32)>,
    /// Ids of ENUM and ENUM64 types, for enumerator lookups.
    enums: Vec<u32>,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn read_u32(data: &[u8], pos: usize) -> Option<u32> {
    let b = data.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

/// A section `[start, start+len)` of the blob, positions relative to the end of the header.
fn section(data: &[u8], base: usize, off: u32, len: u32) -> Result<(usize, usize)> {
    let start = base
        .checked_add(off as usize)
        .ok_or(BtfError::Truncated("section offset overflows"))?;
    let end = start
        .checked_add(len as usize)
        .ok_or(BtfError::Truncated("section length overflows"))?;
    if end > data.len() {
        return Err(BtfError::Truncated(
            "section extends past the end of the data",
        ));
    }
    Ok((start, end))
}

impl Btf {
    /// Reads and parses the running kernel's BTF: mapped where the kernel allows it (6.16+),
    /// read otherwise.
    pub fn from_sys_fs() -> Result<Btf> {
        match mapped::Mapped::open(Path::new(VMLINUX_BTF)) {
            Ok(m) => Self::parse_blob(Blob::Mapped(m)),
            Err(e) => {
                log::debug!("{VMLINUX_BTF} cannot be mapped ({e}): reading it");
                Self::from_file(VMLINUX_BTF)
            }
        }
    }

    /// Reads and parses a raw BTF file (not an ELF `.BTF` section).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Btf> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| BtfError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(data)
    }

    /// Parses a raw BTF blob in this machine's byte order.
    pub fn parse(data: Vec<u8>) -> Result<Btf> {
        Self::parse_blob(Blob::Heap(data))
    }

    fn parse_blob(data: Blob) -> Result<Btf> {
        // Positions are stored as u32 to halve the index; kernel BTF is a few MB.
        if u32::try_from(data.len()).is_err() {
            return Err(BtfError::Truncated("blob larger than 4 GiB"));
        }
        let magic = data
            .get(0..2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .ok_or(BtfError::Truncated("no header"))?;
        if magic != MAGIC {
            return Err(if magic.swap_bytes() == MAGIC {
                BtfError::WrongEndian
            } else {
                BtfError::BadMagic(magic)
            });
        }
        let version = *data.get(2).ok_or(BtfError::Truncated("no header"))?;
        if version != 1 {
            return Err(BtfError::BadVersion(version));
        }
        let hdr = |i: usize| read_u32(&data, 4 + 4 * i).ok_or(BtfError::Truncated("short header"));
        let hdr_len = hdr(0)? as usize;
        let (type_off, type_len, str_off, str_len) = (hdr(1)?, hdr(2)?, hdr(3)?, hdr(4)?);
        if hdr_len < HDR_MIN || hdr_len > data.len() {
            return Err(BtfError::Truncated("bad header length"));
        }
        let (types_start, types_end) = section(&data, hdr_len, type_off, type_len)?;
        let (str_start, str_end) = section(&data, hdr_len, str_off, str_len)?;

        let mut type_pos = Vec::with_capacity(type_len as usize / 16 + 1);
        type_pos.push(0); // id 0 is void
        let mut names = Vec::new();
        let mut enums = Vec::new();
        let mut pos = types_start;
        while pos < types_end {
            let id = type_pos.len() as u32;
            // Errors are built only on failure: built eagerly (`ok_or`) and dropped, they cost
            // 0.4 ms of the 2 ms this loop takes over a kernel's 150 000 types.
            let (Some(name_off), Some(info)) = (
                read_u32(&data[..types_end], pos),
                read_u32(&data[..types_end], pos + 4),
            ) else {
                return Err(BtfError::Truncated("type record cut short"));
            };
            let raw_kind = (info >> 24) & 0x1f;
            let Some(kind) = Kind::from_raw(raw_kind) else {
                return Err(BtfError::UnknownKind { id, kind: raw_kind });
            };
            let next = pos + TYPE_HDR + kind.extra_len((info & 0xffff) as usize);
            if next > types_end {
                return Err(BtfError::Truncated("type data runs past the type section"));
            }
            type_pos.push(pos as u32);
            if kind == Kind::Enum || kind == Kind::Enum64 {
                enums.push(id);
            }
            if kind.is_indexed() && name_off != 0 {
                let name = cstr(&data[str_start..str_end], name_off)?;
                names.push((fnv1a(name), id));
            }
            pos = next;
        }
        names.sort_unstable();
        Ok(Btf {
            data,
            str_start,
            str_end,
            type_pos,
            names,
            enums,
        })
    }

    /// Number of types, void included (valid ids are `1..type_count()`).
    pub fn type_count(&self) -> u32 {
        self.type_pos.len() as u32
    }

    /// Id of the first struct or union named `name`.
    pub fn struct_id(&self, name: &str) -> Result<u32> {
        self.find_named(name, |k| matches!(k, Kind::Struct | Kind::Union))
            .ok_or_else(|| BtfError::NoSuchType(format!("struct {name}")))
    }

    /// Whether a typedef `name` exists. The kernel emits `btf_trace_<tracepoint>` typedefs, so
    /// this tells which tracepoints the running kernel has.
    pub fn has_typedef(&self, name: &str) -> bool {
        self.find_named(name, |k| k == Kind::Typedef).is_some()
    }

    /// Number of parameters of the function type that typedef `name` points to. For the
    /// kernel's `btf_trace_<tracepoint>` typedefs: the tracepoint's arguments plus the leading
    /// context pointer, which tells which arguments a raw tracepoint receives.
    pub fn typedef_fn_params(&self, name: &str) -> Result<u32> {
        let id = self
            .find_named(name, |k| k == Kind::Typedef)
            .ok_or_else(|| BtfError::NoSuchType(format!("typedef {name}")))?;
        let mut id = self.ty(id)?.size_or_type;
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            match t.kind {
                Kind::FuncProto => return Ok(t.vlen as u32),
                k if k.is_modifier() || k == Kind::Ptr => id = t.size_or_type,
                _ => return Err(BtfError::NoSuchType(format!("function type behind {name}"))),
            }
        }
        Err(BtfError::TooDeep)
    }

    /// Whether a function `name` is described (pahole records the functions the kernel kept
    /// out of line): an fentry program can only attach to those. A linear scan, for the rare
    /// kernels that need one.
    pub fn has_func(&self, name: &str) -> bool {
        (1..self.type_count()).any(|id| {
            self.ty(id).is_ok_and(|t| {
                t.kind == Kind::Func && self.name_bytes(t.name_off).ok() == Some(name.as_bytes())
            })
        })
    }

    /// Byte offset of a dotted member path (`"se.sum_exec_runtime"`) in struct `struct_name`.
    /// Members of anonymous structs and unions are found as if they were direct members.
    /// Bitfields are rejected.
    pub fn member_offset(&self, struct_name: &str, path: &str) -> Result<u32> {
        let found = self.find_path(struct_name, path)?;
        self.byte_offset(struct_name, path, &found)
    }

    /// Whether `path` names a member of `struct_name` (bitfields included).
    pub fn has_member(&self, struct_name: &str, path: &str) -> bool {
        self.find_path(struct_name, path).is_ok()
    }

    /// Offset and shape of a member: enough to tell an array of `struct percpu_counter` from a
    /// `struct mm_rss_stat`, and how many elements an array has.
    pub fn member_type(&self, struct_name: &str, path: &str) -> Result<MemberType<'_>> {
        let found = self.find_path(struct_name, path)?;
        let offset = self.byte_offset(struct_name, path, &found)?;
        let id = self.strip(found.type_id)?;
        let t = self.ty(id)?;
        if t.kind == Kind::Array {
            let elem = self.strip(self.u32_at(t.pos + TYPE_HDR)?)?;
            let array_len = self.u32_at(t.pos + TYPE_HDR + 8)?;
            let e = self.ty(elem)?;
            Ok(MemberType {
                offset,
                kind: Kind::Array,
                name: self.name(e.name_off)?,
                elem_kind: e.kind,
                array_len,
                elem_size: self.size_of_id(elem)?,
            })
        } else {
            Ok(MemberType {
                offset,
                kind: t.kind,
                name: self.name(t.name_off)?,
                elem_kind: t.kind,
                array_len: 0,
                elem_size: self.size_of_id(id)?,
            })
        }
    }

    #[cfg(test)]
    /// Like [`Btf::member_type`], reduced to (kind, type name).
    pub fn member_type_name(&self, struct_name: &str, path: &str) -> Result<(Kind, String)> {
        let m = self.member_type(struct_name, path)?;
        Ok((m.kind, m.name.to_string()))
    }

    #[cfg(test)]
    /// Size in bytes of the struct or union `name`, or failing that of a typedef or enum `name`.
    pub fn size_of(&self, name: &str) -> Result<u32> {
        let id = self
            .find_named(name, |k| matches!(k, Kind::Struct | Kind::Union))
            .or_else(|| self.find_named(name, |k| k != Kind::Struct && k != Kind::Union))
            .ok_or_else(|| BtfError::NoSuchType(name.to_string()))?;
        self.size_of_id(id)
    }

    /// Size in bytes of type `id`.
    pub fn size_of_id(&self, id: u32) -> Result<u32> {
        let mut id = id;
        let mut count: u32 = 1;
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            let size = match t.kind {
                Kind::Int
                | Kind::Struct
                | Kind::Union
                | Kind::Enum
                | Kind::Enum64
                | Kind::Float
                | Kind::Datasec => t.size_or_type,
                // BTF does not record pointer width; the kernel we read is the one we run on.
                Kind::Ptr => std::mem::size_of::<usize>() as u32,
                Kind::Array => {
                    let n = self.u32_at(t.pos + TYPE_HDR + 8)?;
                    count = count.checked_mul(n).ok_or(BtfError::NoSize(id))?;
                    id = self.u32_at(t.pos + TYPE_HDR)?;
                    continue;
                }
                k if k.is_modifier() => {
                    id = t.size_or_type;
                    continue;
                }
                _ => return Err(BtfError::NoSize(id)),
            };
            return size.checked_mul(count).ok_or(BtfError::NoSize(id));
        }
        Err(BtfError::TooDeep)
    }

    /// Value of the enumerator `name` in the first ENUM or ENUM64 that has one. Unsigned 64-bit
    /// values above `i64::MAX` come back wrapped.
    pub fn enum_value(&self, name: &str) -> Result<i64> {
        let want = name.as_bytes();
        for &id in &self.enums {
            let t = self.ty(id)?;
            let stride = if t.kind == Kind::Enum64 { 12 } else { 8 };
            for i in 0..t.vlen {
                let p = t.pos + TYPE_HDR + i * stride;
                if self.name_bytes(self.u32_at(p)?)? != want {
                    continue;
                }
                let lo = self.u32_at(p + 4)?;
                return Ok(if t.kind == Kind::Enum64 {
                    (u64::from(self.u32_at(p + 8)?) << 32 | u64::from(lo)) as i64
                } else if t.kflag {
                    i64::from(lo as i32)
                } else {
                    i64::from(lo)
                });
            }
        }
        Err(BtfError::NoSuchEnumerator(name.to_string()))
    }

    #[cfg(test)]
    /// Name of type `id` ("" when anonymous).
    pub fn type_name(&self, id: u32) -> Result<&str> {
        self.name(self.ty(id)?.name_off)
    }

    #[cfg(test)]
    /// Kind of type `id`.
    pub fn kind(&self, id: u32) -> Result<Kind> {
        Ok(self.ty(id)?.kind)
    }

    fn ty(&self, id: u32) -> Result<Ty> {
        if id == 0 {
            return Err(BtfError::BadTypeId(0));
        }
        // No error value unless one is returned (see `parse_blob`): lookups run this for
        // thousands of types at every start-up.
        let Some(&pos) = self.type_pos.get(id as usize) else {
            return Err(BtfError::BadTypeId(id));
        };
        let pos = pos as usize;
        let info = self.u32_at(pos + 4)?;
        let raw_kind = (info >> 24) & 0x1f;
        let Some(kind) = Kind::from_raw(raw_kind) else {
            return Err(BtfError::UnknownKind { id, kind: raw_kind });
        };
        Ok(Ty {
            pos,
            name_off: self.u32_at(pos)?,
            kind,
            kflag: info >> 31 != 0,
            vlen: (info & 0xffff) as usize,
            size_or_type: self.u32_at(pos + 8)?,
        })
    }

    fn u32_at(&self, pos: usize) -> Result<u32> {
        match read_u32(&self.data, pos) {
            Some(v) => Ok(v),
            None => Err(BtfError::Truncated("read past the end")),
        }
    }

    fn name_bytes(&self, off: u32) -> Result<&[u8]> {
        let Some(strs) = self.data.get(self.str_start..self.str_end) else {
            return Err(BtfError::Truncated("string section"));
        };
        cstr(strs, off)
    }

    fn name(&self, off: u32) -> Result<&str> {
        std::str::from_utf8(self.name_bytes(off)?)
            .map_err(|_| BtfError::Truncated("name is not UTF-8"))
    }

    fn find_named(&self, name: &str, want: impl Fn(Kind) -> bool) -> Option<u32> {
        let h = fnv1a(name.as_bytes());
        let first = self.names.partition_point(|&(k, _)| k < h);
        self.names[first..]
            .iter()
            .take_while(|&&(k, _)| k == h)
            .map(|&(_, id)| id)
            .find(|&id| {
                self.ty(id).is_ok_and(|t| {
                    want(t.kind) && self.name_bytes(t.name_off).ok() == Some(name.as_bytes())
                })
            })
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn strip(&self, mut id: u32) -> Result<u32> {
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            if !t.kind.is_modifier() {
                return Ok(id);
            }
            id = t.size_or_type;
        }
        Err(BtfError::TooDeep)
    }

    fn find_path(&self, struct_name: &str, path: &str) -> Result<Found> {
        let mut cur = self.struct_id(struct_name)?;
        let mut bit_off: u64 = 0;
        let mut budget = MEMBER_BUDGET;
        let mut found = None;
        let mut prefix_end = 0;
        for comp in path.split('.') {
            let ty_desc = || {
                if prefix_end == 0 {
                    struct_name.to_string()
                } else {
                    let prefix = path.get(..prefix_end - 1).unwrap_or(path);
                    format!("{struct_name}.{prefix}")
                }
            };
            if let Some(Found { type_id, .. }) = found.take() {
                cur = self.strip(type_id)?;
                if !matches!(self.ty(cur)?.kind, Kind::Struct | Kind::Union) {
                    return Err(BtfError::NotComposite {
                        ty: ty_desc(),
                        member: comp.to_string(),
                    });
                }
            }
            let f = self
                .find_in(cur, comp.as_bytes(), 0, &mut budget)?
                .ok_or_else(|| BtfError::NoSuchMember {
                    ty: ty_desc(),
                    member: comp.to_string(),
                })?;
            bit_off = bit_off
                .checked_add(f.bit_off)
                .ok_or(BtfError::Truncated("member offset overflows"))?;
            found = Some(f);
            prefix_end += comp.len() + 1;
        }
        let f = found.ok_or(BtfError::Truncated("empty member path"))?;
        Ok(Found { bit_off, ..f })
    }

    /// Searches struct/union `id` for member `name`, looking inside anonymous members.
    fn find_in(&self, id: u32, name: &[u8], depth: u32, budget: &mut u32) -> Result<Option<Found>> {
        let t = self.ty(id)?;
        for i in 0..t.vlen {
            let Some(left) = budget.checked_sub(1) else {
                return Err(BtfError::TooDeep);
            };
            *budget = left;
            let m = t.pos + TYPE_HDR + 12 * i;
            let (name_off, type_id, raw) =
                (self.u32_at(m)?, self.u32_at(m + 4)?, self.u32_at(m + 8)?);
            // With kind_flag the offset word packs the bitfield size above a 24-bit bit offset.
            let (bit_off, bitfield_size) = if t.kflag {
                (u64::from(raw & 0xff_ffff), raw >> 24)
            } else {
                (u64::from(raw), 0)
            };
            if name_off == 0 {
                let inner = self.strip(type_id)?;
                if !matches!(self.ty(inner)?.kind, Kind::Struct | Kind::Union) {
                    continue;
                }
                if depth >= MAX_DEPTH {
                    return Err(BtfError::TooDeep);
                }
                if let Some(f) = self.find_in(inner, name, depth + 1, budget)? {
                    return Ok(Some(Found {
                        bit_off: bit_off + f.bit_off,
                        ..f
                    }));
                }
            } else if self.name_bytes(name_off)? == name {
                return Ok(Some(Found {
                    bit_off,
                    bitfield_size,
                    type_id,
                }));
            }
        }
        Ok(None)
    }

    fn byte_offset(&self, struct_name: &str, path: &str, f: &Found) -> Result<u32> {
        if f.bitfield_size != 0
            || !f.bit_off.is_multiple_of(8)
            || self.is_int_bitfield(f.type_id)?
        {
            return Err(BtfError::Bitfield {
                ty: struct_name.to_string(),
                member: path.to_string(),
            });
        }
        u32::try_from(f.bit_off / 8).map_err(|_| BtfError::Truncated("member offset overflows"))
    }

    /// Old-style bitfields (no kind_flag) are INTs whose encoding uses fewer bits than their size
    /// or starts at a bit offset.
    fn is_int_bitfield(&self, type_id: u32) -> Result<bool> {
        let t = self.ty(self.strip(type_id)?)?;
        if t.kind != Kind::Int {
            return Ok(false);
        }
        let enc = self.u32_at(t.pos + TYPE_HDR)?;
        let (bits, off) = (enc & 0xff, (enc >> 16) & 0xff);
        Ok(off != 0 || u64::from(bits) != u64::from(t.size_or_type) * 8)
    }
}

/// The NUL-terminated string at `off` in a string section.
fn cstr(strs: &[u8], off: u32) -> Result<&[u8]> {
    // No error value unless one is returned (see `parse_blob`): this runs once per name.
    let Some(rest) = strs.get(off as usize..) else {
        return Err(BtfError::Truncated("name offset past the string section"));
    };
    match rest.iter().position(|&b| b == 0) {
        Some(len) => Ok(&rest[..len]),
        None => Err(BtfError::Truncated("unterminated string")),
    }
}

mod mapped;
#[cfg(test)]
pub(crate) mod tests;
