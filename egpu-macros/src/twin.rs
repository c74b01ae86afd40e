//! The native twin: the probe function as written, with the probe's arithmetic.
//!
//! `+ - * / % << >>` and unary `-` (and their compound assignments) become calls of
//! `egpu::__private::twin`, which compute exactly as the eBPF program does (wrapping, eBPF's
//! division by zero, shift amounts modulo the width); map operations used as statements have
//! their results ignored. Everything else is Rust as written.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{BinOp, Expr, Ident, ItemFn, Stmt, UnOp, parse_quote};

use crate::args::Krate;

/// The rewriter, with the path by which it names egpu.
struct Twin<'k>(&'k Krate);

fn arithmetic(op: &BinOp) -> Option<(&'static str, bool)> {
    Some(match op {
        BinOp::Add(_) => ("add", false),
        BinOp::Sub(_) => ("sub", false),
        BinOp::Mul(_) => ("mul", false),
        BinOp::Div(_) => ("div", false),
        BinOp::Rem(_) => ("rem", false),
        BinOp::Shl(_) => ("shl", false),
        BinOp::Shr(_) => ("shr", false),
        BinOp::AddAssign(_) => ("add", true),
        BinOp::SubAssign(_) => ("sub", true),
        BinOp::MulAssign(_) => ("mul", true),
        BinOp::DivAssign(_) => ("div", true),
        BinOp::RemAssign(_) => ("rem", true),
        BinOp::ShlAssign(_) => ("shl", true),
        BinOp::ShrAssign(_) => ("shr", true),
        _ => return None,
    })
}

impl VisitMut for Twin<'_> {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        visit_mut::visit_expr_mut(self, e);
        let span = e.span();
        let replaced: Option<Expr> = match e {
            Expr::Binary(b) => arithmetic(&b.op).map(|(f, assign)| {
                let f = Ident::new(f, b.op.span());
                // The operands become arguments: parentheses around them are not needed.
                let (l, r) = (unparen(&b.left), unparen(&b.right));
                let egpu = self.0.at(span);
                let call: TokenStream = quote_spanned!(span=> #egpu::__private::twin::#f(#l, #r));
                if assign { parse_quote!(#l = #call) } else { parse_quote!(#call) }
            }),
            // `#[bound(N)] while c { .. }` runs at most N iterations, as the probe does.
            Expr::While(w) if crate::lower::bound(&w.attrs).is_some_and(|b| b.is_ok()) => {
                let n = crate::lower::bound(&w.attrs).and_then(Result::ok).expect("checked");
                let (cond, body) = (&w.cond, &w.body);
                Some(parse_quote!({
                    let mut __egpu_iterations: u64 = 0;
                    while __egpu_iterations < (#n) as u64 && (#cond) {
                        __egpu_iterations += 1;
                        #body
                    }
                }))
            }
            Expr::Loop(l) if crate::lower::bound(&l.attrs).is_some_and(|b| b.is_ok()) => {
                let n = crate::lower::bound(&l.attrs).and_then(Result::ok).expect("checked");
                let body = &l.body;
                Some(parse_quote!({
                    let mut __egpu_iterations: u64 = 0;
                    while __egpu_iterations < (#n) as u64 {
                        __egpu_iterations += 1;
                        #body
                    }
                }))
            }
            Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
                let v = unparen(&u.expr);
                let egpu = self.0.at(Span::call_site());
                Some(parse_quote!(#egpu::__private::twin::neg(#v)))
            }
            _ => None,
        };
        if let Some(r) = replaced {
            *e = r;
        }
    }

    fn visit_stmt_mut(&mut self, s: &mut Stmt) {
        // Items (`const`s) keep Rust's own arithmetic: they are evaluated at compile time, by
        // both the twin and the builder.
        if let Stmt::Item(_) = s {
            return;
        }
        visit_mut::visit_stmt_mut(self, s);
        if let Stmt::Expr(Expr::MethodCall(m), Some(_)) = s {
            let m = m.clone();
            *s = parse_quote!(let _ = #m;);
        }
    }
}

/// `e` without the parentheses around it.
fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

/// The twin of `func`, naming egpu by `krate`.
pub(crate) fn twin(func: &ItemFn, krate: &Krate) -> TokenStream {
    let mut func = func.clone();
    Twin(krate).visit_block_mut(&mut func.block);
    // The twin is there for tests and native callers; a program that only runs the probe does
    // not call it.
    quote!(#[allow(dead_code)] #func)
}
