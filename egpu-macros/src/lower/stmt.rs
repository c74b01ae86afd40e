//! Statements: `let` (a variable, a struct or array local, or a value set branch by branch),
//! assignments and compound assignments, and expressions in statement position.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{BinOp, Block, Expr, Ident, Pat, Stmt, Type};

use super::{Kind, Lower};

impl Lower {
    /// A statement's builder code, after the call that records where it is in the source.
    pub(super) fn stmt(&mut self, stmt: &Stmt) -> TokenStream {
        let code = match stmt {
            Stmt::Local(local) => self.let_stmt(local),
            Stmt::Item(syn::Item::Const(c)) => return quote!(#c),
            Stmt::Item(item) => {
                self.error(item.span(), "items other than `const` cannot be declared in a probe")
            }
            Stmt::Macro(m) => self.print(&m.mac),
            Stmt::Expr(e, _) => self.expr_stmt(e),
        };
        let at = self.at(stmt_start(stmt));
        quote!(#at #code)
    }

    /// The builder call recording that the code recorded next comes from `span`'s line and
    /// column: `file!()`, `line!()` and `column!()` spanned there, so that rustc gives the
    /// user's location.
    pub(super) fn at(&self, span: Span) -> TokenStream {
        let p = self.builder();
        quote_spanned!(span=> #p::at(::core::file!(), ::core::line!(), ::core::column!());)
    }

    /// `let x = v;`, `let x: T;`, `let s = S { .. };` (a struct or array local), or
    /// `let x = if c { a } else { b };` (each branch setting `x`).
    fn let_stmt(&mut self, local: &syn::Local) -> TokenStream {
        let p = self.builder();
        let (ident, ty) = match &local.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                (pi.ident.clone(), None)
            }
            Pat::Type(pt) => match &*pt.pat {
                Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                    (pi.ident.clone(), Some((*pt.ty).clone()))
                }
                other => {
                    return self
                        .error(other.span(), "a `let` binds one name: patterns are not supported");
                }
            },
            other => {
                return self
                    .error(other.span(), "a `let` binds one name: patterns are not supported");
            }
        };
        if let Some(init) = &local.init
            && matches!(&*init.expr, Expr::Struct(_) | Expr::Array(_) | Expr::Repeat(_))
        {
            let value = match &*init.expr {
                Expr::Struct(lit) => self.struct_lit(lit, &ident.to_string()),
                other => self.array_lit(other, &ident.to_string()),
            };
            self.scopes.last_mut().expect("a scope").insert(ident.to_string(), Kind::Struct);
            return quote_spanned!(local.span()=> let #ident = #value;);
        }
        if let Some(init) = &local.init
            && let Some(root) = self.place_root(&init.expr)
            && matches!(&*init.expr, Expr::Path(_))
        {
            return self
                .error(root.span(), "copying a struct is not supported yet: read its fields");
        }
        if let Some(ty) = &ty
            && !crate::probe::is_integer_type(ty)
            && !matches!(ty, Type::Path(tp) if tp.path.is_ident("bool"))
        {
            return self.error(
                ty.span(),
                "locals are integers or `bool` (structs and arrays are not supported yet)",
            );
        }
        let ty = ty.map_or_else(|| quote!(_), |t| quote!(#t));
        let code = match &local.init {
            Some(init)
                if matches!(&*init.expr, Expr::If(i) if !matches!(&*i.cond, Expr::Let(_)))
                    && init.diverge.is_none() =>
            {
                // Each branch sets the variable itself: no temporary. It is named apart until
                // the branches are done: they may read a variable it shadows (`let w = if w >
                // 10 { 10 } else { w };`), as in Rust.
                let fresh = quote::format_ident!("__egpu_let_{}", ident);
                let set = self.set_into(&fresh, &init.expr);
                quote_spanned!(local.span()=>
                    let #fresh = #p::local_uninit::<#ty>(); #set let #ident = #fresh;)
            }
            Some(init) => {
                if let Some((_, diverge)) = &init.diverge {
                    return self.error(diverge.span(), "`let .. else` is not supported");
                }
                let v = self.expr(&init.expr);
                quote_spanned!(local.span()=> let #ident = #p::local::<#ty>(#v);)
            }
            None => quote_spanned!(local.span()=> let #ident = #p::local_uninit::<#ty>();),
        };
        self.scopes.last_mut().expect("a scope").insert(ident.to_string(), Kind::Local);
        code
    }

    /// An expression in statement position.
    pub(super) fn expr_stmt(&mut self, e: &Expr) -> TokenStream {
        let p = self.builder();
        let span = e.span();
        match e {
            Expr::Assign(a) => self.assign(&a.left, None, &a.right, span),
            Expr::Binary(b) if compound(&b.op).is_some() => {
                self.assign(&b.left, compound(&b.op), &b.right, span)
            }
            Expr::If(i) => self.if_stmt(i),
            Expr::ForLoop(f) => self.for_loop(f),
            Expr::While(w) => self.while_loop(w),
            Expr::Loop(l) => self.bounded_loop(l),
            Expr::Break(b) => {
                if b.label.is_some() || b.expr.is_some() {
                    self.error(span, "`break` takes no label and no value in probes")
                } else if self.loops == 0 {
                    self.error(span, "`break` outside a loop")
                } else {
                    quote_spanned!(span=> #p::brk();)
                }
            }
            Expr::Continue(c) => {
                if c.label.is_some() {
                    self.error(span, "`continue` takes no label in probes")
                } else if self.loops == 0 {
                    self.error(span, "`continue` outside a loop")
                } else {
                    quote_spanned!(span=> #p::cont();)
                }
            }
            Expr::Return(_) if self.helper.is_some() => self.error(
                span,
                "a helper returns its tail expression: `return` is not supported in helpers",
            ),
            Expr::Return(r) => match &r.expr {
                Some(v) => {
                    let v = self.expr(v);
                    quote_spanned!(span=> #p::ret(#v);)
                }
                None => quote_spanned!(span=> #p::ret_unit();),
            },
            Expr::Block(b) => {
                let inner = self.scoped(|l| l.block_stmts(&b.block, false));
                quote!({ #inner })
            }
            Expr::MethodCall(m) => self.map_call(m),
            Expr::Match(m) => self.match_expr(m, false),
            Expr::Macro(m) => self.print(&m.mac),
            Expr::Paren(inner) => self.expr_stmt(&inner.expr),
            other => {
                let v = self.expr(other);
                quote_spanned!(span=> let _ = #v;)
            }
        }
    }

    /// `place = value` or `place op= value`.
    fn assign(
        &mut self,
        left: &Expr,
        op: Option<&'static str>,
        right: &Expr,
        span: Span,
    ) -> TokenStream {
        let p = self.builder();
        let value = self.expr(right);
        match left {
            Expr::Path(path) if path.path.get_ident().is_some() => {
                let ident = path.path.get_ident().expect("checked");
                match self.lookup(&ident.to_string()) {
                    Some(Kind::Local) => {
                        let value = match op {
                            Some(f) => {
                                let f = Ident::new(f, span);
                                quote_spanned!(span=> #p::#f(#p::get(#ident), #value))
                            }
                            None => value,
                        };
                        quote_spanned!(span=> #p::set(#ident, #value);)
                    }
                    Some(Kind::Value) => {
                        self.error(ident.span(), "a loop index cannot be assigned")
                    }
                    Some(Kind::Struct | Kind::Found) => {
                        self.error(ident.span(), "a struct is assigned field by field")
                    }
                    None => self.error(
                        ident.span(),
                        "only locals of the probe and fields of a user context can be assigned",
                    ),
                }
            }
            Expr::Field(_) | Expr::Index(_) if self.place_root(left).is_some() => {
                let root = self.place_root(left).expect("checked");
                if self.lookup(&root.to_string()) == Some(Kind::Found) {
                    return self.error(
                        left.span(),
                        "a value a lookup found is read-only: write it with `insert` or `fetch_add`",
                    );
                }
                let path = self.field_path(left);
                let value = match op {
                    Some(f) => {
                        let f = Ident::new(f, span);
                        quote_spanned!(span=> #p::#f(#p::field(#root, |__v| &#path), #value))
                    }
                    None => value,
                };
                quote_spanned!(span=> #p::store_field(#root, |__v| &#path, #value);)
            }
            Expr::Field(_) | Expr::Index(_) if self.rooted_at_ctx(left) => {
                let (ctx_ty, place) = (self.ctx_ty.clone(), self.ctx_place(left));
                let value = match op {
                    Some(f) => {
                        let f = Ident::new(f, span);
                        quote_spanned!(span=> #p::#f(#p::ctx_field::<#ctx_ty, _>(|__c: &#ctx_ty| &#place), #value))
                    }
                    None => value,
                };
                quote_spanned!(span=> #p::ctx_store::<#ctx_ty, _>(|__c: &#ctx_ty| &#place, #value);)
            }
            other => self.error(
                other.span(),
                "only locals of the probe and fields of a user context can be assigned",
            ),
        }
    }

    /// Builder code setting variable `dst` to the value of `e`, with an `if` (or a block) setting
    /// it in each branch rather than through a temporary.
    fn set_into(&mut self, dst: &Ident, e: &Expr) -> TokenStream {
        let p = self.builder();
        match e {
            Expr::If(i) if !matches!(&*i.cond, Expr::Let(_)) => {
                let Some((_, otherwise)) = &i.else_branch else {
                    return self.error(i.span(), "an `if` used as a value needs an `else`");
                };
                let cond = self.expr(&i.cond);
                let then = self.set_block_into(dst, &i.then_branch);
                let otherwise = match &**otherwise {
                    Expr::Block(b) => self.set_block_into(dst, &b.block),
                    other => self.set_into(dst, other),
                };
                quote_spanned!(i.span()=> #p::if_(#cond, || { #then }, || { #otherwise });)
            }
            Expr::Block(b) => self.set_block_into(dst, &b.block),
            Expr::Paren(inner) => self.set_into(dst, &inner.expr),
            other => {
                let v = self.expr(other);
                quote_spanned!(other.span()=> #p::set(#dst, #v);)
            }
        }
    }

    fn set_block_into(&mut self, dst: &Ident, block: &Block) -> TokenStream {
        self.scoped(|l| {
            let Some((Stmt::Expr(tail, None), init)) = block.stmts.split_last() else {
                return l.error(block.span(), "a block used as a value ends with an expression");
            };
            let stmts: TokenStream = init.iter().map(|s| l.stmt(s)).collect();
            let set = l.set_into(dst, tail);
            quote!({ #stmts #set })
        })
    }
}

/// Where a statement starts: for a loop, its keyword (after any `#[bound(N)]`).
fn stmt_start(stmt: &Stmt) -> Span {
    match stmt {
        Stmt::Expr(Expr::While(w), _) => w.while_token.span,
        Stmt::Expr(Expr::ForLoop(f), _) => f.for_token.span,
        Stmt::Expr(Expr::Loop(l), _) => l.loop_token.span,
        Stmt::Local(local) => local.let_token.span,
        other => other.span(),
    }
}

/// The builder function of a compound assignment operator.
fn compound(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::AddAssign(_) => "add",
        BinOp::SubAssign(_) => "sub",
        BinOp::MulAssign(_) => "mul",
        BinOp::DivAssign(_) => "div",
        BinOp::RemAssign(_) => "rem",
        BinOp::BitAndAssign(_) => "bitand",
        BinOp::BitOrAssign(_) => "bitor",
        BinOp::BitXorAssign(_) => "bitxor",
        BinOp::ShlAssign(_) => "shl",
        BinOp::ShrAssign(_) => "shr",
        _ => return None,
    })
}
