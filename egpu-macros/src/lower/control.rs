//! Control flow: `if` (and `if let` on a map lookup), `match` on integers, and loops, each with
//! a bound the verifier can see: `for i in 0..N`, `#[bound(N)] while`, `#[bound(N)] loop`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, Pat, RangeLimits, UnOp};

use super::{Kind, Lower};

impl Lower {
    pub(super) fn if_stmt(&mut self, i: &syn::ExprIf) -> TokenStream {
        let p = self.builder();
        if let Expr::Let(lt) = &*i.cond {
            return self.if_let_get(i, lt, false);
        }
        let cond = self.expr(&i.cond);
        let then = self.scoped(|l| l.block_stmts(&i.then_branch, false));
        let otherwise = match &i.else_branch {
            Some((_, e)) => match &**e {
                Expr::If(inner) => self.if_stmt(inner),
                Expr::Block(b) => self.scoped(|l| l.block_stmts(&b.block, false)),
                other => self.error(other.span(), "unexpected `else` branch"),
            },
            None => TokenStream::new(),
        };
        quote_spanned!(i.span()=> #p::if_(#cond, || { #then }, || { #otherwise });)
    }

    /// Lowers a loop's body, where `break` and `continue` are allowed.
    fn loop_body(&mut self, f: impl FnOnce(&mut Lower) -> TokenStream) -> TokenStream {
        self.loops += 1;
        let body = f(self);
        self.loops -= 1;
        body
    }

    /// `if let Some(v) = MAP.get(&key) { .. } else { .. }` on a hash map, `if let Ok(v) =
    /// ARRAY.get(index) { .. }` on an array (the twin's `Array::get` gives a `Result`): a lookup,
    /// with `v` the value in place (read-only) in the first branch.
    pub(super) fn if_let_get(
        &mut self,
        i: &syn::ExprIf,
        lt: &syn::ExprLet,
        value: bool,
    ) -> TokenStream {
        let p = self.builder();
        let shape = "`if let` takes a map lookup: `if let Some(value) = MAP.get(&key) { .. }`, \
                     or on an array `if let Ok(value) = ARRAY.get(index) { .. }`";
        let Pat::TupleStruct(ts) = &*lt.pat else { return self.error(lt.pat.span(), shape) };
        let array = ts.path.is_ident("Ok");
        let binding = match (
            ts.path.is_ident("Some") || array,
            ts.elems.iter().collect::<Vec<_>>().as_slice(),
        ) {
            (true, [Pat::Ident(pi)]) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                pi.ident.clone()
            }
            _ => return self.error(lt.pat.span(), shape),
        };
        let Expr::MethodCall(m) = &*lt.expr else { return self.error(lt.expr.span(), shape) };
        let Some(map) = self.static_receiver(m) else {
            return self.error(m.receiver.span(), shape);
        };
        if m.method != "get" || m.args.len() != 1 {
            return self.error(m.method.span(), shape);
        }
        // A hash map's key by reference, an array's index by value.
        if array == matches!(m.args[0], Expr::Reference(_)) {
            return self.error(m.args[0].span(), shape);
        }
        let name = map.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        let (key, get) = match array {
            true => (self.expr(&m.args[0]), quote!(array_get)),
            false => (self.by_ref(&m.args[0]), quote!(hash_get)),
        };
        if value {
            let then = self.scoped(|l| {
                l.scopes.last_mut().expect("a scope").insert(binding.to_string(), Kind::Found);
                l.value_block(&i.then_branch)
            });
            let otherwise = match &i.else_branch {
                Some((_, e)) => match &**e {
                    Expr::Block(b) => self.value_block(&b.block),
                    other => self.expr(other),
                },
                None => return self.error(i.span(), "an `if let` used as a value needs an `else`"),
            };
            return quote_spanned!(i.span()=> {
                let __t = #p::local_uninit();
                #p::#get(&#map, #name, #key, |#binding| #p::set(__t, #then), || #p::set(__t, #otherwise));
                #p::get(__t)
            });
        }
        let then = self.scoped(|l| {
            l.scopes.last_mut().expect("a scope").insert(binding.to_string(), Kind::Found);
            l.block_stmts(&i.then_branch, false)
        });
        let otherwise = match &i.else_branch {
            Some((_, e)) => match &**e {
                Expr::If(inner) => self.if_stmt(inner),
                Expr::Block(b) => self.scoped(|l| l.block_stmts(&b.block, false)),
                other => self.error(other.span(), "unexpected `else` branch"),
            },
            None => TokenStream::new(),
        };
        quote_spanned!(i.span()=> #p::#get(&#map, #name, #key, |#binding| { #then }, || { #otherwise });)
    }

    pub(super) fn for_loop(&mut self, f: &syn::ExprForLoop) -> TokenStream {
        let p = self.builder();
        let ident = match &*f.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.clone(),
            Pat::Wild(w) => Ident::new("_", w.span()),
            other => return self.error(other.span(), "a `for` loop binds one name"),
        };
        let Expr::Range(range) = &*f.expr else {
            return self.error(
                f.expr.span(),
                "a `for` loop runs over a range with constant bounds: `for i in 0..N`",
            );
        };
        let start_zero = match range.start.as_deref() {
            Some(Expr::Lit(l)) => matches!(&l.lit, Lit::Int(i) if i.base10_digits() == "0"),
            _ => false,
        };
        if !start_zero || !matches!(range.limits, RangeLimits::HalfOpen(_)) {
            return self.error(range.span(), "a `for` loop runs over `0..N`");
        }
        let Some(end) = range.end.as_deref() else {
            return self.error(range.span(), "a `for` loop needs an end: `0..N`");
        };
        if !self.is_constant(end) {
            return self.error(end.span(), "the loop bound must be a constant (a literal or a `const`), so the verifier can see it");
        }
        let body = self.loop_body(|l| {
            l.scoped(|l| {
                l.scopes.last_mut().expect("a scope").insert(ident.to_string(), Kind::Value);
                l.block_stmts(&f.body, false)
            })
        });
        quote_spanned!(f.span()=> #p::repeat(#end, |#ident| { #body });)
    }

    /// `#[bound(N)] while cond { .. }`: at most `N` iterations, each first testing `cond`.
    pub(super) fn while_loop(&mut self, w: &syn::ExprWhile) -> TokenStream {
        let p = self.builder();
        let span = w.span();
        match bound(&w.attrs) {
            Some(Ok(n)) if !self.is_constant(&n) => {
                self.error(n.span(), "the bound must be a constant (a literal or a `const`)")
            }
            Some(Ok(n)) => {
                let cond = self.expr(&w.cond);
                let body = self.loop_body(|l| l.scoped(|l| l.block_stmts(&w.body, false)));
                quote_spanned!(span=> #p::repeat(#n, |_| {
                    #p::if_(#p::not(#cond), || #p::brk(), || {});
                    #body
                });)
            }
            Some(Err(e)) => self.error(e.span(), e.to_string()),
            None => self.error(
                w.span(),
                "a `while` loop needs a bound the verifier can see: `#[bound(N)] while ..` (at most N iterations), or `for i in 0..N`",
            ),
        }
    }

    /// `#[bound(N)] loop { .. }`: at most `N` iterations.
    pub(super) fn bounded_loop(&mut self, l: &syn::ExprLoop) -> TokenStream {
        let p = self.builder();
        let span = l.span();
        match bound(&l.attrs) {
            Some(Ok(n)) if !self.is_constant(&n) => {
                self.error(n.span(), "the bound must be a constant (a literal or a `const`)")
            }
            Some(Ok(n)) => {
                let body = self.loop_body(|lw| lw.scoped(|lw| lw.block_stmts(&l.body, false)));
                quote_spanned!(span=> #p::repeat(#n, |_| { #body });)
            }
            Some(Err(e)) => self.error(e.span(), e.to_string()),
            None => self.error(
                l.span(),
                "a `loop` needs a bound the verifier can see: `#[bound(N)] loop { .. }` (at most N iterations)",
            ),
        }
    }

    /// `match` on an integer: the scrutinee is evaluated once, then the arms are tried in
    /// order as a chain of `if`s. Arms are literals, constants, `|` alternatives, ranges and `_`
    /// (rustc checks, on the twin, that the arms cover every value). As a value, every arm sets
    /// one variable.
    pub(super) fn match_expr(&mut self, m: &syn::ExprMatch, value: bool) -> TokenStream {
        let p = self.builder();
        let scrutinee = self.expr(&m.expr);
        let mut chain = TokenStream::new();
        for arm in m.arms.iter().rev() {
            if let Some((_, guard)) = &arm.guard {
                return self.error(guard.span(), "match guards are not supported in probes");
            }
            let body = if value {
                let v = match &*arm.body {
                    Expr::Block(b) => self.value_block(&b.block),
                    other => self.expr(other),
                };
                quote!(#p::set(__m_result, #v);)
            } else {
                match &*arm.body {
                    Expr::Block(b) => self.scoped(|l| l.block_stmts(&b.block, false)),
                    other => self.expr_stmt(other),
                }
            };
            let cond = match self.pattern(&arm.pat) {
                Some(c) => c,
                None => return quote!(::core::unreachable!()),
            };
            chain = match cond {
                None => body,
                Some(cond) => quote!(#p::if_(#cond, || { #body }, || { #chain });),
            };
        }
        let span = m.span();
        if value {
            quote_spanned!(span=> {
                let __m = #p::local(#scrutinee);
                let __m_result = #p::local_uninit();
                #chain
                #p::get(__m_result)
            })
        } else {
            quote_spanned!(span=> {
                let __m = #p::local(#scrutinee);
                #chain
            })
        }
    }

    /// The condition a `match` pattern tests on `__m`: `None` for `_` (always), or `Some`
    /// builder code; an unsupported pattern is an error (`Option::None` returned).
    fn pattern(&mut self, pat: &Pat) -> Option<Option<TokenStream>> {
        let p = self.builder();
        let value = |l: &mut Lower, e: &Expr| -> Option<TokenStream> {
            if !l.is_constant(e)
                && !matches!(e, Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) && l.is_constant(&u.expr))
            {
                l.error(e.span(), "a `match` pattern is a literal, a constant or a range of them");
                return None;
            }
            Some(quote!(#p::lit(#e)))
        };
        Some(match pat {
            Pat::Wild(_) => None,
            Pat::Lit(l) => {
                let v = value(self, &Expr::Lit(l.clone()))?;
                Some(quote!(#p::eq(#p::get(__m), #v)))
            }
            Pat::Path(path) => {
                let v = value(self, &Expr::Path(path.clone()))?;
                Some(quote!(#p::eq(#p::get(__m), #v)))
            }
            Pat::Range(r) => {
                let lo = match &r.start {
                    Some(e) => Some(value(self, e)?),
                    None => None,
                };
                let hi = match &r.end {
                    Some(e) => Some(value(self, e)?),
                    None => None,
                };
                let lo = lo.map(|lo| quote!(#p::ge(#p::get(__m), #lo)));
                let hi = hi.map(|hi| match r.limits {
                    RangeLimits::Closed(_) => quote!(#p::le(#p::get(__m), #hi)),
                    RangeLimits::HalfOpen(_) => quote!(#p::lt(#p::get(__m), #hi)),
                });
                match (lo, hi) {
                    (Some(a), Some(b)) => Some(quote!(#p::and(#a, #b))),
                    (Some(c), None) | (None, Some(c)) => Some(c),
                    (None, None) => None,
                }
            }
            Pat::Or(or) => {
                let mut cond: Option<TokenStream> = None;
                for case in &or.cases {
                    match self.pattern(case)? {
                        None => return Some(None),
                        Some(c) => {
                            cond = Some(match cond {
                                Some(acc) => quote!(#p::or(#acc, #c)),
                                None => c,
                            })
                        }
                    }
                }
                cond
            }
            Pat::Paren(inner) => return self.pattern(&inner.pat),
            other => {
                self.error(
                    other.span(),
                    "a `match` pattern is a literal, a constant, a range, `|` of them, or `_`",
                );
                return None;
            }
        })
    }
}

/// The `N` of a `#[bound(N)]` attribute, if there is one: the most iterations of a `while` or
/// `loop`.
pub(crate) fn bound(attrs: &[syn::Attribute]) -> Option<syn::Result<Expr>> {
    let attr = attrs.iter().find(|a| a.path().is_ident("bound"))?;
    Some(attr.parse_args::<Expr>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`#[bound(N)]` takes the most iterations, a constant: {e}"),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse_from_the_attribute() {
        let w: syn::ExprWhile = syn::parse_quote!(
            #[bound(16)]
            while x > 0 {
                x -= 1;
            }
        );
        assert!(matches!(bound(&w.attrs), Some(Ok(Expr::Lit(_)))));
        let w: syn::ExprWhile = syn::parse_quote!(while x > 0 {
            x -= 1;
        });
        assert!(bound(&w.attrs).is_none());
    }
}
