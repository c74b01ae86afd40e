//! Expressions, as builder code giving a `Val<T>`: literals, names, fields, operators, casts,
//! and `if`, `match` and blocks used as values.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{BinOp, Expr, Ident, Lit, UnOp};

use super::{Kind, Lower};

impl Lower {
    /// An expression, as builder code giving a `Val<T>`.
    pub(crate) fn expr(&mut self, e: &Expr) -> TokenStream {
        let p = self.builder();
        let span = e.span();
        match e {
            Expr::Lit(l) => match &l.lit {
                Lit::Int(_) | Lit::Bool(_) | Lit::Byte(_) => quote_spanned!(span=> #p::lit(#l)),
                Lit::Float(_) => self
                    .error(span, "floats are not supported in probes (eBPF has no floating point)"),
                _ => self.error(span, "only integer and `bool` literals are supported in probes"),
            },
            Expr::Path(path) => match path.path.get_ident() {
                Some(ident) if *ident == self.ctx => {
                    self.error(span, "the context is read through its fields: `ctx.field`")
                }
                Some(ident) => match self.lookup(&ident.to_string()) {
                    Some(Kind::Local) => quote_spanned!(span=> #p::get(#ident)),
                    Some(Kind::Value) => quote_spanned!(span=> #ident),
                    Some(Kind::Struct | Kind::Found) => quote_spanned!(span=> #p::load(#ident)),
                    None => quote_spanned!(span=> #p::lit(#path)),
                },
                None => quote_spanned!(span=> #p::lit(#path)),
            },
            Expr::Field(_) | Expr::Index(_) if self.rooted_at_ctx(e) => {
                let ctx_ty = self.ctx_ty.clone();
                let place = self.ctx_place(e);
                quote_spanned!(span=> #p::ctx_field::<#ctx_ty, _>(|__c: &#ctx_ty| &#place))
            }
            Expr::Field(_) | Expr::Index(_) if self.place_root(e).is_some() => {
                let root = self.place_root(e).expect("checked");
                let path = self.field_path(e);
                quote_spanned!(span=> #p::field(#root, |__v| &#path))
            }
            Expr::Field(_) | Expr::Index(_) => self.error(
                span,
                "fields and indices are read from the context, struct locals and looked-up values",
            ),
            Expr::Paren(inner) => self.expr(&inner.expr),
            Expr::Group(inner) => self.expr(&inner.expr),
            Expr::Binary(b) => {
                let (l, r) = (self.expr(&b.left), self.expr(&b.right));
                let f = match b.op {
                    BinOp::Add(_) => "add",
                    BinOp::Sub(_) => "sub",
                    BinOp::Mul(_) => "mul",
                    BinOp::Div(_) => "div",
                    BinOp::Rem(_) => "rem",
                    BinOp::BitAnd(_) => "bitand",
                    BinOp::BitOr(_) => "bitor",
                    BinOp::BitXor(_) => "bitxor",
                    BinOp::Shl(_) => "shl",
                    BinOp::Shr(_) => "shr",
                    BinOp::Eq(_) => "eq",
                    BinOp::Ne(_) => "ne",
                    BinOp::Lt(_) => "lt",
                    BinOp::Le(_) => "le",
                    BinOp::Gt(_) => "gt",
                    BinOp::Ge(_) => "ge",
                    BinOp::And(_) => "and",
                    BinOp::Or(_) => "or",
                    _ => return self.error(span, "an assignment is a statement, not a value"),
                };
                let f = Ident::new(f, b.op.span());
                quote_spanned!(span=> #p::#f(#l, #r))
            }
            Expr::Unary(u) => {
                let f = match u.op {
                    UnOp::Neg(_) => quote!(neg),
                    UnOp::Not(_) => quote!(not),
                    _ => return self.error(span, "dereferences are not supported in probes"),
                };
                let v = self.expr(&u.expr);
                quote_spanned!(span=> #p::#f(#v))
            }
            Expr::Cast(c) => {
                let v = self.expr(&c.expr);
                let ty = &c.ty;
                if !crate::probe::is_integer_type(ty) {
                    return self.error(ty.span(), "casts are between integer types");
                }
                quote_spanned!(span=> #p::cast::<#ty, _>(#v))
            }
            Expr::If(i) if matches!(&*i.cond, Expr::Let(_)) => {
                let Expr::Let(lt) = &*i.cond else { unreachable!("matched") };
                self.if_let_get(i, lt, true)
            }
            Expr::If(i) => {
                let Some((_, otherwise)) = &i.else_branch else {
                    return self.error(span, "an `if` used as a value needs an `else`");
                };
                let cond = self.expr(&i.cond);
                let then = self.value_block(&i.then_branch);
                let otherwise = match &**otherwise {
                    Expr::Block(b) => self.value_block(&b.block),
                    other => {
                        let v = self.expr(other);
                        quote!(#v)
                    }
                };
                quote_spanned!(span=> {
                    let __t = #p::local_uninit();
                    #p::if_(#cond, || #p::set(__t, #then), || #p::set(__t, #otherwise));
                    #p::get(__t)
                })
            }
            Expr::Block(b) => self.value_block(&b.block),
            Expr::Call(call) => self.call(call),
            Expr::MethodCall(m) => {
                let on_static = matches!(&*m.receiver, Expr::Path(r)
                    if r.path.get_ident().is_none_or(|i| self.lookup(&i.to_string()).is_none() && *i != self.ctx));
                let message = if on_static {
                    "map operations are statements; their result cannot be used yet"
                } else {
                    "methods cannot be called in probes: only map operations on `static` maps, as statements"
                };
                self.error(m.span(), message)
            }
            Expr::Reference(r) => {
                self.error(r.span(), "references are only passed to map operations")
            }
            Expr::Closure(c) => self.error(c.span(), "closures are not supported in probes"),
            Expr::Macro(m) => {
                let name = m.mac.path.segments.last().map(|s| s.ident.to_string());
                let message = match name.as_deref() {
                    Some(heap @ ("vec" | "format")) => format!(
                        "`{heap}!` allocates on the heap, which probes cannot: eBPF has a \
                         512-byte stack and maps (use a fixed-size array: `[0u64; 4]`)"
                    ),
                    _ => "`egpu::print!` is a statement, not a value".to_string(),
                };
                self.error(m.span(), message)
            }
            Expr::Array(a) => self.error(
                a.span(),
                "an array literal is bound with `let` or passed to a map operation by reference",
            ),
            Expr::Struct(s) => self.error(
                s.span(),
                "a struct literal is bound with `let` or passed to a map operation by reference",
            ),
            Expr::Tuple(t) => self.error(t.span(), "tuples are not supported in probes"),
            Expr::Match(m) => self.match_expr(m, true),
            Expr::Range(r) => self.error(r.span(), "ranges are only the bounds of `for` loops"),
            other => self.error(other.span(), "this expression is not supported in probes"),
        }
    }
}
