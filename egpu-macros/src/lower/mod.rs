//! Lowering a probe's body to Rust code that builds its IR.
//!
//! Every expression becomes a call of `egpu::__private::probe` returning a typed handle
//! (`Val<T>`): `a + b` becomes `add(a, b)`, `x` (a local) `get(x)`, `ctx.grid[0]` a context field
//! found by a closure over the context type (so rustc gives its offset and type), `v as u64`
//! `cast::<u64, _>(v)`. Statements become calls that record IR statements: `let` declares a
//! variable, `if` passes its branches as closures, `for i in 0..N` becomes `repeat`. Spans are
//! the user's, so rustc's type errors point at the probe's tokens.
//!
//! This module holds the lowering context (`Lower`: the names in scope, the loops around the
//! code, the errors) and blocks; each kind of construct has its own module:
//!
//! | module | constructs |
//! |---|---|
//! | `stmt` | `let`, assignments, expressions as statements |
//! | `expr` | expressions as values: literals, names, operators, casts |
//! | `control` | `if`, `if let` on a lookup, `match`, bounded loops, `#[bound(N)]` |
//! | `calls` | map operations, egpu's helpers, `#[egpu::helper]` functions |
//! | `places` | struct and array literals, fields and indices (of locals and the context) |
//! | `print` | `egpu::print!` |

mod calls;
mod control;
mod expr;
mod places;
mod print;
mod stmt;

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Block, Expr, Ident, Stmt, Type};

use crate::args::Krate;

pub(crate) use control::bound;

/// What a name in the probe's body stands for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A `let` variable: a `Local<T>` handle.
    Local,
    /// A loop index: a `Val<T>` handle, read-only.
    Value,
    /// A struct (or array) local: a `Loc<T>` on the stack, whose fields can be written.
    Struct,
    /// A value a map lookup found: a `Loc<T>` in the map, read-only.
    Found,
}

/// The lowering context of one probe or helper: the names in scope, the loops around the code
/// being lowered, and the errors found so far.
pub(crate) struct Lower {
    ctx: Ident,
    ctx_ty: Type,
    scopes: Vec<HashMap<String, Kind>>,
    /// Loops around the code being lowered.
    loops: u32,
    /// The helper being lowered, if it is one.
    helper: Option<Ident>,
    /// The probe builder's path: `::egpu::__private::probe`, or under the `crate = PATH` given.
    builder: TokenStream,
    pub(crate) errors: Vec<(Span, String)>,
}

impl Lower {
    pub(crate) fn new(ctx: Ident, ctx_ty: Type, krate: &Krate) -> Lower {
        Lower {
            ctx,
            ctx_ty,
            scopes: vec![HashMap::new()],
            loops: 0,
            helper: None,
            builder: krate.builder(),
            errors: Vec::new(),
        }
    }

    /// The probe builder's path, which the lowered code calls.
    fn builder(&self) -> TokenStream {
        self.builder.clone()
    }

    fn error(&mut self, span: Span, message: impl Into<String>) -> TokenStream {
        self.errors.push((span, message.into()));
        quote!(::core::unreachable!())
    }

    fn lookup(&self, name: &str) -> Option<Kind> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    fn scoped<R>(&mut self, f: impl FnOnce(&mut Lower) -> R) -> R {
        self.scopes.push(HashMap::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    /// Declares a helper's argument as a read-only value.
    pub(crate) fn declare_value(&mut self, ident: &Ident) {
        self.scopes.last_mut().expect("a scope").insert(ident.to_string(), Kind::Value);
    }

    /// Declares a helper's `mut` argument as a variable.
    pub(crate) fn declare_local(&mut self, ident: &Ident) {
        self.scopes.last_mut().expect("a scope").insert(ident.to_string(), Kind::Local);
    }

    /// A helper's body: its statements, then its tail expression's value when it returns one.
    /// A helper cannot call itself or `return` early.
    pub(crate) fn helper_body(
        &mut self,
        block: &Block,
        returns: bool,
        name: &Ident,
    ) -> TokenStream {
        self.helper = Some(name.clone());
        if returns { self.value_block(block) } else { self.scoped(|l| l.block_stmts(block, false)) }
    }

    /// The function body: its statements, and its tail as the result when the probe returns one.
    pub(crate) fn body(&mut self, block: &Block, returns: bool) -> TokenStream {
        self.scoped(|l| l.block_stmts(block, returns))
    }

    /// A block's statements as builder code; a tail expression is returned (`ret`) when
    /// `tail_returns`, else lowered as a statement.
    fn block_stmts(&mut self, block: &Block, tail_returns: bool) -> TokenStream {
        let mut out = TokenStream::new();
        let n = block.stmts.len();
        for (i, stmt) in block.stmts.iter().enumerate() {
            let last = i + 1 == n;
            out.extend(match stmt {
                Stmt::Expr(e, None) if last && tail_returns => {
                    let at = self.at(e.span());
                    let v = self.expr(e);
                    let p = self.builder();
                    quote_spanned!(e.span()=> #at #p::ret(#v);)
                }
                other => self.stmt(other),
            });
        }
        out
    }

    /// A block used as a value: its statements, then its tail expression's value.
    fn value_block(&mut self, block: &Block) -> TokenStream {
        self.scoped(|l| {
            let Some((Stmt::Expr(tail, None), init)) = block.stmts.split_last() else {
                return l.error(block.span(), "a block used as a value ends with an expression");
            };
            let stmts: TokenStream = init.iter().map(|s| l.stmt(s)).collect();
            let v = l.expr(tail);
            quote!({ #stmts #v })
        })
    }

    /// Whether `e` is a constant the builder can evaluate: literals, paths that are not locals
    /// (consts), and arithmetic on them.
    fn is_constant(&self, e: &Expr) -> bool {
        match e {
            Expr::Lit(_) => true,
            Expr::Path(p) => p
                .path
                .get_ident()
                .is_none_or(|i| self.lookup(&i.to_string()).is_none() && *i != self.ctx),
            Expr::Paren(p) => self.is_constant(&p.expr),
            Expr::Binary(b) => self.is_constant(&b.left) && self.is_constant(&b.right),
            Expr::Cast(c) => self.is_constant(&c.expr),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_constructs_are_errors_at_their_tokens() {
        let mut lower =
            Lower::new(syn::parse_quote!(ctx), syn::parse_quote!(Ctx), &Krate::default());
        let block: Block = syn::parse_quote!({
            let x = 1.5;
            let y = ctx.a + 1;
            helper_fn(y);
        });
        let out = lower.body(&block, false).to_string();
        let messages: Vec<&String> = lower.errors.iter().map(|e| &e.1).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].starts_with("floats are not supported"), "{messages:?}");
        assert!(out.contains("ctx_field"), "{out}");
        assert!(out.contains("helper_fn :: __egpu_inline"), "{out}");
    }

    #[test]
    fn each_statement_records_its_location_first() {
        let mut lower =
            Lower::new(syn::parse_quote!(ctx), syn::parse_quote!(Ctx), &Krate::default());
        let block: Block = syn::parse_quote!({
            let mut x = ctx.a;
            const K: u64 = 3;
            #[bound(4)]
            while x > K {
                x -= 1;
            }
            x
        });
        let out = lower.body(&block, true).to_string();
        assert!(lower.errors.is_empty(), "{:?}", lower.errors);
        let at = ":: egpu :: __private :: probe :: at (:: core :: file ! () , :: core :: line ! () , :: core :: column ! ()) ;";
        // `let`, `while`, `x -= 1` and the tail; not the `const`.
        assert_eq!(out.matches(at).count(), 4, "{out}");
        assert!(out.starts_with(at), "{out}");
        let before_loop = out.find(":: repeat").and_then(|i| out[..i].rfind(at));
        assert!(before_loop.is_some_and(|i| i > out.find("const K").unwrap_or(0)), "{out}");
    }

    fn errors_of(block: Block) -> Vec<String> {
        let mut lower =
            Lower::new(syn::parse_quote!(ctx), syn::parse_quote!(Ctx), &Krate::default());
        lower.body(&block, false);
        lower.errors.into_iter().map(|e| e.1).collect()
    }

    #[test]
    fn heap_types_and_associated_functions_are_not_callable() {
        let errors = errors_of(syn::parse_quote!({
            let v = Vec::new();
            let s = std::string::String::new();
            let w = vec![1u64];
            let m = u64::max(ctx.a, 1);
            let n = core::cmp::max(ctx.a, 1);
            let t = egpu::helpers::ktime_ns();
            let h = crate::helpers_of_mine::bucket(ctx.a);
        }));
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].starts_with("`Vec::new` allocates on the heap"), "{errors:?}");
        assert!(errors[1].starts_with("`std::string::String::new` allocates"), "{errors:?}");
        assert!(errors[2].starts_with("`vec!` allocates on the heap"), "{errors:?}");
        assert!(errors[3].contains("associated functions of types (`u64`)"), "{errors:?}");
        assert!(errors[4].contains("the standard library is not Probe Rust"), "{errors:?}");
    }

    #[test]
    fn arrays_that_cannot_fit_the_stack_are_refused() {
        let errors = errors_of(syn::parse_quote!({
            let a = [0u64; 64];
            let b = [0u64; 65];
            let c = [0u8; 512];
            let d = [0; 513];
            let e = [1u16, 2, 3];
            let f = [ctx.a; 100];
        }));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("this array of 65 `u64` is 520 bytes"), "{errors:?}");
        assert!(errors[0].contains("at most 64 `u64`"), "{errors:?}");
        assert!(errors[1].starts_with("an array of 513 elements"), "{errors:?}");
    }
}
