//! Just enough BTF to read libbpf's map definitions in `.maps`: each map a variable of a struct
//! whose members say, by their types, what the map is (`__uint(max_entries, 64)` is a member
//! `int (*max_entries)[64]`, `__type(key, u64)` a member `u64 *key`). Layout as the kernel's
//! `btf.h` documents it (RFC 9669's companion); every offset is checked.

use super::ElfError;

/// The kinds of type this reader tells apart (`BTF_KIND_*`).
mod kind {
    pub(super) const INT: u32 = 1;
    pub(super) const PTR: u32 = 2;
    pub(super) const ARRAY: u32 = 3;
    pub(super) const STRUCT: u32 = 4;
    pub(super) const UNION: u32 = 5;
    pub(super) const ENUM: u32 = 6;
    pub(super) const FWD: u32 = 7;
    pub(super) const TYPEDEF: u32 = 8;
    pub(super) const VOLATILE: u32 = 9;
    pub(super) const CONST: u32 = 10;
    pub(super) const RESTRICT: u32 = 11;
    pub(super) const FUNC: u32 = 12;
    pub(super) const FUNC_PROTO: u32 = 13;
    pub(super) const VAR: u32 = 14;
    pub(super) const DATASEC: u32 = 15;
    pub(super) const FLOAT: u32 = 16;
    pub(super) const DECL_TAG: u32 = 17;
    pub(super) const TYPE_TAG: u32 = 18;
    pub(super) const ENUM64: u32 = 19;
}

/// One type: its kind, name, `size_or_type` word and the words after it.
#[derive(Clone, Debug)]
struct Type {
    kind: u32,
    name: String,
    vlen: usize,
    size_or_type: u32,
    /// The kind's data after the common part, as 32-bit words.
    data: Vec<u32>,
    /// A struct's or union's members' names.
    members: Vec<String>,
}

/// A map as `.maps` declares it: its name and the numbers its members give.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct BtfMap {
    pub(super) name: String,
    pub(super) kind: Option<u32>,
    pub(super) key_size: Option<u32>,
    pub(super) value_size: Option<u32>,
    pub(super) max_entries: Option<u32>,
}

/// Parsed BTF: its types, by id (id 0, `void`, is not stored).
pub(super) struct Btf {
    types: Vec<Type>,
}

fn word(b: &[u8], at: usize) -> Result<u32, ElfError> {
    let bytes = at.checked_add(4).and_then(|end| b.get(at..end)).ok_or_else(|| bad("truncated"))?;
    Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn bad(why: &str) -> ElfError {
    ElfError::Btf(why.to_owned())
}

impl Btf {
    /// Reads a `.BTF` section.
    pub(super) fn parse(b: &[u8]) -> Result<Btf, ElfError> {
        if b.len() < 24 || b[..2] != [0x9f, 0xeb] {
            return Err(bad("no BTF header (magic 0xeB9F, little-endian)"));
        }
        let header = word(b, 4)? as usize;
        let [type_off, type_len, str_off, str_len] =
            [8, 12, 16, 20].map(|at| word(b, at).map(|w| w as usize));
        let span = |off: Result<usize, ElfError>, len: Result<usize, ElfError>| {
            let start = header.checked_add(off?).ok_or_else(|| bad("offset overflows"))?;
            let end = start.checked_add(len?).ok_or_else(|| bad("length overflows"))?;
            b.get(start..end).ok_or_else(|| bad("a section lies past the data"))
        };
        let (types, strings) = (span(type_off, type_len)?, span(str_off, str_len)?);
        let name = |off: u32| -> Result<String, ElfError> {
            let rest = strings.get(off as usize..).ok_or_else(|| bad("a name past the strings"))?;
            let end = rest.iter().position(|&c| c == 0).ok_or_else(|| bad("unterminated name"))?;
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        };
        let mut out = Vec::new();
        let mut at = 0;
        while at < types.len() {
            let info = word(types, at + 4)?;
            let (vlen, k) = ((info & 0xffff) as usize, (info >> 24) & 0x1f);
            let extra_words = match k {
                kind::INT | kind::VAR | kind::DECL_TAG => 1,
                kind::ARRAY => 3,
                kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 3 * vlen,
                kind::ENUM | kind::FUNC_PROTO => 2 * vlen,
                kind::PTR
                | kind::FWD
                | kind::TYPEDEF
                | kind::VOLATILE
                | kind::CONST
                | kind::RESTRICT
                | kind::FUNC
                | kind::FLOAT
                | kind::TYPE_TAG => 0,
                other => return Err(bad(&format!("unknown type kind {other}"))),
            };
            let data: Vec<u32> =
                (0..extra_words).map(|i| word(types, at + 12 + 4 * i)).collect::<Result<_, _>>()?;
            let members = match k {
                kind::STRUCT | kind::UNION => {
                    (0..vlen).map(|m| name(data[3 * m])).collect::<Result<_, _>>()?
                }
                _ => Vec::new(),
            };
            out.push(Type {
                kind: k,
                name: name(word(types, at)?)?,
                vlen,
                size_or_type: word(types, at + 8)?,
                data,
                members,
            });
            at += 12 + 4 * extra_words;
            if out.len() > 1 << 20 {
                return Err(bad("more than a million types"));
            }
        }
        Ok(Btf { types: out })
    }

    fn get(&self, id: u32) -> Result<&Type, ElfError> {
        let i = (id as usize).checked_sub(1).ok_or_else(|| bad("type 0 (void) where a type is"))?;
        self.types.get(i).ok_or_else(|| bad(&format!("no type {id}")))
    }

    /// `id` past typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Result<&Type, ElfError> {
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = t.size_or_type;
                }
                _ => return Ok(t),
            }
        }
        Err(bad("a chain of typedefs too long"))
    }

    /// The bytes of a value of type `id`.
    fn size(&self, id: u32, depth: u32) -> Result<u32, ElfError> {
        if depth > 32 {
            return Err(bad("types nested too deep"));
        }
        let t = self.resolve(id)?;
        match t.kind {
            kind::INT | kind::STRUCT | kind::UNION | kind::ENUM | kind::ENUM64 | kind::FLOAT => {
                Ok(t.size_or_type)
            }
            kind::PTR => Ok(8),
            kind::ARRAY => {
                let elem = self.size(t.data[0], depth + 1)?;
                elem.checked_mul(t.data[2]).ok_or_else(|| bad("an array too large"))
            }
            other => Err(bad(&format!("a key or value of type kind {other}, which has no size"))),
        }
    }

    /// The maps `.maps` declares, in the order of its variables.
    pub(super) fn maps(&self) -> Result<Vec<BtfMap>, ElfError> {
        let Some(sec) = self.types.iter().find(|t| t.kind == kind::DATASEC && t.name == ".maps")
        else {
            return Ok(Vec::new());
        };
        let mut maps = Vec::new();
        for v in 0..sec.vlen {
            let var = self.get(sec.data[3 * v])?;
            if var.kind != kind::VAR {
                return Err(bad("an entry of .maps is not a variable"));
            }
            let def = self.resolve(var.size_or_type)?;
            if def.kind != kind::STRUCT {
                return Err(bad(&format!("map {}: its definition is not a struct", var.name)));
            }
            let mut map = BtfMap { name: var.name.clone(), ..BtfMap::default() };
            for m in 0..def.vlen {
                let member_name = def.members[m].clone();
                let member = self.resolve(def.data[3 * m + 1])?;
                // `__uint(name, n)`: a pointer to an array of n ints. `__type(name, T)`: a
                // pointer to T.
                let number = || -> Result<u32, ElfError> {
                    let array = self.resolve(member.size_or_type)?;
                    match (member.kind, array.kind) {
                        (kind::PTR, kind::ARRAY) => Ok(array.data[2]),
                        _ => {
                            Err(bad(&format!("map {}: `{member_name}` is not a number", var.name)))
                        }
                    }
                };
                let typed = || -> Result<u32, ElfError> {
                    match member.kind {
                        kind::PTR => self.size(member.size_or_type, 0),
                        _ => Err(bad(&format!("map {}: `{member_name}` is not a type", var.name))),
                    }
                };
                match member_name.as_str() {
                    "type" => map.kind = Some(number()?),
                    "max_entries" => map.max_entries = Some(number()?),
                    "key_size" => map.key_size = Some(number()?),
                    "value_size" => map.value_size = Some(number()?),
                    "key" => map.key_size = Some(typed()?),
                    "value" => map.value_size = Some(typed()?),
                    // `map_flags`, `pinning`, …: nothing egpu's maps take.
                    _ => {}
                }
            }
            maps.push(map);
        }
        Ok(maps)
    }
}
