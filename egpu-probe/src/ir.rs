//! The probe IR: what a Probe Rust function means, with every size and offset resolved.
//!
//! A probe is a tree of statements over typed scalar variables, stack buffers, the context and
//! map values. Control flow is structured (`if`, counted loops, early `return`), and a map value
//! can only be reached inside the `found` branch of the [`Stmt::Lookup`] that produced its
//! pointer, so every program the code generator emits passes the verifier's null checks by
//! construction.
//!
//! # Semantics
//! Every scalar value is kept in canonical form: the 64-bit value of the integer, zero-extended
//! for unsigned types and sign-extended for signed ones ([`Ty::canonical`]). Each operation is
//! that of Rust's `wrapping_*` methods at the operand type, except:
//! - division and remainder follow eBPF: `x / 0 == 0`, `x % 0 == x`, and `MIN / -1` wraps to
//!   `MIN` with remainder 0;
//! - the shift amount is taken modulo the type's width (as `wrapping_shl` does).
//!
//! [`Expr::eval_binary`] and [`Ty::cast`] are the reference for both the code generator and
//! the native twin of a probe.

use egpu_ebpf::{AluOp, AttachPoint, MapDef, Width};

/// A scalar type of Probe Rust.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// `bool`: 0 or 1.
    Bool,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64` (and `usize`).
    U64,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64` (and `isize`).
    I64,
}

impl Ty {
    /// Every type.
    pub const ALL: [Ty; 9] =
        [Ty::Bool, Ty::U8, Ty::U16, Ty::U32, Ty::U64, Ty::I8, Ty::I16, Ty::I32, Ty::I64];

    /// Width in bits (1 for `bool`).
    pub const fn bits(self) -> u32 {
        match self {
            Ty::Bool => 1,
            Ty::U8 | Ty::I8 => 8,
            Ty::U16 | Ty::I16 => 16,
            Ty::U32 | Ty::I32 => 32,
            Ty::U64 | Ty::I64 => 64,
        }
    }

    /// Bytes in memory.
    pub const fn bytes(self) -> u32 {
        match self {
            Ty::Bool => 1,
            _ => self.bits() / 8,
        }
    }

    /// Whether the type is signed.
    pub const fn signed(self) -> bool {
        matches!(self, Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64)
    }

    /// The canonical 64-bit form of the low bits of `v` as this type.
    pub const fn canonical(self, v: u64) -> u64 {
        let bits = self.bits();
        if bits == 64 {
            v
        } else if self.signed() {
            (((v << (64 - bits)) as i64) >> (64 - bits)) as u64
        } else {
            v & ((1 << bits) - 1)
        }
    }

    /// `v` (canonical for `from`) converted with `as` to this type. `bool` converts to integers
    /// only.
    pub const fn cast(self, v: u64) -> u64 {
        self.canonical(v)
    }

    /// The Rust name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::U8 => "u8",
            Ty::U16 => "u16",
            Ty::U32 => "u32",
            Ty::U64 => "u64",
            Ty::I8 => "i8",
            Ty::I16 => "i16",
            Ty::I32 => "i32",
            Ty::I64 => "i64",
        }
    }
}

/// A scalar variable of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// A buffer on the probe's stack: a local struct, array, key or record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Buf(pub u32);

/// A map value pointer, bound by a [`Stmt::Lookup`] for its `found` branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ptr(pub u32);

/// An entry of the probe's map table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MapRef(pub u32);

/// Where bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// The context, at a byte offset (read-only except for user contexts).
    Ctx(u32),
    /// A stack buffer, at a byte offset.
    Buf(Buf, u32),
    /// The map value a lookup found, at a byte offset.
    Value(Ptr, u32),
}

/// A binary arithmetic or bitwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+`, wrapping.
    Add,
    /// `-`, wrapping.
    Sub,
    /// `*`, wrapping.
    Mul,
    /// `/`, eBPF's: `x / 0 == 0`.
    Div,
    /// `%`, eBPF's: `x % 0 == x`.
    Rem,
    /// `&`.
    And,
    /// `|`.
    Or,
    /// `^`.
    Xor,
    /// `<<`, the amount modulo the width.
    Shl,
    /// `>>` (arithmetic for signed types), the amount modulo the width.
    Shr,
}

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl CmpOp {
    /// The comparison that holds exactly when this one does not.
    pub const fn negated(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
        }
    }

    /// Whether `a op b` holds for canonical values of `ty`.
    pub fn holds(self, ty: Ty, a: u64, b: u64) -> bool {
        let ord = if ty.signed() { (a as i64).cmp(&(b as i64)) } else { a.cmp(&b) } as i8;
        match self {
            CmpOp::Eq => ord == 0,
            CmpOp::Ne => ord != 0,
            CmpOp::Lt => ord < 0,
            CmpOp::Le => ord <= 0,
            CmpOp::Gt => ord > 0,
            CmpOp::Ge => ord >= 0,
        }
    }
}

/// A unary operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `-x`, wrapping.
    Neg,
    /// `!x`: bitwise not, or logical not of a `bool`.
    Not,
}

/// An argument of a helper call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CallArg {
    /// A scalar.
    Value(Expr),
    /// A map of the table.
    Map(MapRef),
    /// The address of a place (a key, a value or a record).
    Addr(Place),
}

/// An expression: a scalar value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// A constant, canonical for its type.
    Const(Ty, u64),
    /// A variable.
    Var(Var),
    /// A scalar read from memory.
    Load(Ty, Place),
    /// `op arg`.
    Unary(UnOp, Ty, Box<Expr>),
    /// `lhs op rhs`, both of type `Ty` (the amount of a shift may have any integer type).
    Binary(BinOp, Ty, Box<Expr>, Box<Expr>),
    /// `lhs op rhs` of type `Ty`, giving a `bool`.
    Cmp(CmpOp, Ty, Box<Expr>, Box<Expr>),
    /// `arg as to`.
    Cast {
        /// The type converted to.
        to: Ty,
        /// The type of `arg`.
        from: Ty,
        /// The value converted.
        arg: Box<Expr>,
    },
    /// `lhs && rhs`, short-circuit.
    And(Box<Expr>, Box<Expr>),
    /// `lhs || rhs`, short-circuit.
    Or(Box<Expr>, Box<Expr>),
    /// A helper call whose result has type `Ty`.
    Call(Ty, u32, Vec<CallArg>),
}

/// A leaf an expression reads ([`Expr::reads`]): a variable, or a place (a load's, or a helper
/// argument passed by address).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Read<'a> {
    Var(Var),
    Place(&'a Place),
}

impl Expr {
    /// Calls `f` with each variable and place the expression reads, left to right.
    pub(crate) fn reads<'a>(&'a self, f: &mut impl FnMut(Read<'a>)) {
        match self {
            Expr::Const(..) => {}
            Expr::Var(v) => f(Read::Var(*v)),
            Expr::Load(_, p) => f(Read::Place(p)),
            Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => a.reads(f),
            Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                a.reads(f);
                b.reads(f);
            }
            Expr::Call(_, _, args) => {
                for a in args {
                    match a {
                        CallArg::Value(e) => e.reads(f),
                        CallArg::Addr(p) => f(Read::Place(p)),
                        CallArg::Map(_) => {}
                    }
                }
            }
        }
    }

    /// The value of `lhs op rhs` for canonical values of `ty` (for a shift, `rhs` is the
    /// amount, of any type).
    pub fn eval_binary(op: BinOp, ty: Ty, lhs: u64, rhs: u64) -> u64 {
        // Canonical values are 64-bit integers of the right sign, so 64-bit operations followed
        // by canonicalisation give the narrow types' wrapping results.
        let width = Width::W64;
        let signed = ty.signed();
        let raw = match op {
            BinOp::Add => lhs.wrapping_add(rhs),
            BinOp::Sub => lhs.wrapping_sub(rhs),
            BinOp::Mul => lhs.wrapping_mul(rhs),
            BinOp::Div => {
                AluOp::eval(if signed { AluOp::SDiv } else { AluOp::Div }, width, lhs, rhs)
            }
            BinOp::Rem => {
                AluOp::eval(if signed { AluOp::SMod } else { AluOp::Mod }, width, lhs, rhs)
            }
            BinOp::And => lhs & rhs,
            BinOp::Or => lhs | rhs,
            BinOp::Xor => lhs ^ rhs,
            BinOp::Shl => lhs << (rhs % u64::from(ty.bits())),
            BinOp::Shr if signed => ((lhs as i64) >> (rhs % u64::from(ty.bits()))) as u64,
            BinOp::Shr => lhs >> (rhs % u64::from(ty.bits())),
        };
        ty.canonical(raw)
    }

    /// The expression with its operations on constants computed (one level: the operands are
    /// already folded when expressions are built bottom-up).
    pub fn folded(self) -> Expr {
        let constant = |e: &Expr| match e {
            Expr::Const(_, v) => Some(*v),
            _ => None,
        };
        match &self {
            Expr::Unary(op, ty, a) => match constant(a) {
                Some(a) => Expr::Const(*ty, Expr::eval_unary(*op, *ty, a)),
                None => self,
            },
            Expr::Binary(op, ty, a, b) => match (constant(a), constant(b)) {
                (Some(a), Some(b)) => Expr::Const(*ty, Expr::eval_binary(*op, *ty, a, b)),
                _ => self,
            },
            Expr::Cmp(op, ty, a, b) => match (constant(a), constant(b)) {
                (Some(a), Some(b)) => Expr::Const(Ty::Bool, u64::from(op.holds(*ty, a, b))),
                _ => self,
            },
            Expr::Cast { to, arg, .. } => match constant(arg) {
                Some(a) => Expr::Const(*to, to.cast(a)),
                None => self,
            },
            Expr::And(a, b) | Expr::Or(a, b) => {
                let is_and = matches!(self, Expr::And(..));
                match (constant(a), constant(b)) {
                    (Some(a), Some(b)) => {
                        let v = if is_and { a != 0 && b != 0 } else { a != 0 || b != 0 };
                        Expr::Const(Ty::Bool, u64::from(v))
                    }
                    _ => self,
                }
            }
            _ => self,
        }
    }

    /// The value of `op arg` for a canonical value of `ty`.
    pub fn eval_unary(op: UnOp, ty: Ty, arg: u64) -> u64 {
        match (op, ty) {
            (UnOp::Not, Ty::Bool) => arg ^ 1,
            (UnOp::Not, _) => ty.canonical(!arg),
            (UnOp::Neg, _) => ty.canonical(arg.wrapping_neg()),
        }
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// `var = value`.
    Set(Var, Expr),
    /// Stores a scalar of type `Ty` into a place.
    Store(Ty, Place, Expr),
    /// Adds `value` atomically to the `u32` or `u64` at a place (a stack buffer or a map value).
    AtomicAdd(Ty, Place, Expr),
    /// An expression evaluated for its effect (a helper call).
    Eval(Expr),
    /// `if cond { then } else { otherwise }`.
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    /// `for var in 0..count { body }`, `var` of type `u32`. After the loop, `var` is `count`
    /// (if not 0), or its value at the `break` that left it. The code generator makes a loop
    /// with more than 8 conditional jumps in all (iterations × branches of the body) a
    /// `bpf_loop` call with a callback, which the verifier checks in time linear in the body,
    /// and the others plain loops; the results are the same.
    Repeat(Var, u32, Vec<Stmt>),
    /// Leaves the innermost `Repeat`.
    Break,
    /// Goes on with the next iteration of the innermost `Repeat`.
    Continue,
    /// Looks `key` up in `map` (`bpf_map_lookup_elem`): `found` runs with `ptr` bound to the
    /// value, `missing` otherwise.
    Lookup {
        /// The map.
        map: MapRef,
        /// Where the key is (`key_size` bytes).
        key: Place,
        /// The pointer bound to the value in `found`.
        ptr: Ptr,
        /// What runs when the key is present.
        found: Vec<Stmt>,
        /// What runs when it is not.
        missing: Vec<Stmt>,
    },
    /// Ends the probe with a value.
    Return(Expr),
    /// Marks where in the Rust source the statements after it come from, up to the next `At`
    /// or the end of its statement list (whose own code is then the enclosing statement's
    /// again). It emits no code; `#[egpu::probe]` puts one before each statement it lowers, and
    /// the code generator turns them into the program's [`SourceMap`](crate::SourceMap).
    At(SourceLoc),
}

/// Where a statement of a probe is in its Rust source: `file!()`, `line!()` and `column!()` at
/// the statement's first token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    /// The file, as `file!()` gives it (relative to the workspace of the crate being built).
    pub file: &'static str,
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

impl std::fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A stack buffer's declaration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufDecl {
    /// The local's name, for messages.
    pub name: String,
    /// Bytes.
    pub size: u32,
    /// Alignment: 1, 2, 4 or 8.
    pub align: u32,
}

/// A probe in IR form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeIr {
    /// The attach point (it fixes the context).
    pub attach: AttachPoint,
    /// The type of each variable.
    pub vars: Vec<Ty>,
    /// The stack buffers.
    pub bufs: Vec<BufDecl>,
    /// How many map value pointers the probe binds.
    pub ptrs: u32,
    /// The map table.
    pub maps: Vec<MapDef>,
    /// The body.
    pub body: Vec<Stmt>,
}
