//! Lowering a probe's body to Rust code that builds its IR.
//!
//! Every expression becomes a call of `egpu::__private::probe` returning a typed handle
//! (`Val<T>`): `a + b` becomes `add(a, b)`, `x` (a local) `get(x)`, `ctx.grid[0]` a context field
//! found by a closure over the context type (so rustc gives its offset and type), `v as u64`
//! `cast::<u64, _>(v)`. Statements become calls that record IR statements: `let` declares a
//! variable, `if` passes its branches as closures, `for i in 0..N` becomes `repeat`. Spans are
//! the user's, so rustc's type errors point at the probe's tokens.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{BinOp, Block, Expr, Ident, Lit, Pat, RangeLimits, Stmt, Type, UnOp};

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

pub(crate) struct Lower {
    ctx: Ident,
    ctx_ty: Type,
    scopes: Vec<HashMap<String, Kind>>,
    /// Loops around the code being lowered.
    loops: u32,
    /// The helper being lowered, if it is one.
    helper: Option<Ident>,
    pub(crate) errors: Vec<(Span, String)>,
}

/// The helpers a probe may call, by name.
const HELPERS: [&str; 3] = ["ktime_ns", "cpu_id", "prandom_u32"];

fn p() -> TokenStream {
    quote!(::egpu::__private::probe)
}

impl Lower {
    pub(crate) fn new(ctx: Ident, ctx_ty: Type) -> Lower {
        Lower {
            ctx,
            ctx_ty,
            scopes: vec![HashMap::new()],
            loops: 0,
            helper: None,
            errors: Vec::new(),
        }
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
                    let v = self.expr(e);
                    let p = p();
                    quote_spanned!(e.span()=> #p::ret(#v);)
                }
                other => self.stmt(other),
            });
        }
        out
    }

    fn stmt(&mut self, stmt: &Stmt) -> TokenStream {
        let p = p();
        match stmt {
            Stmt::Local(local) => {
                let (ident, ty) = match &local.pat {
                    Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                        (pi.ident.clone(), None)
                    }
                    Pat::Type(pt) => match &*pt.pat {
                        Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                            (pi.ident.clone(), Some((*pt.ty).clone()))
                        }
                        other => {
                            return self.error(
                                other.span(),
                                "a `let` binds one name: patterns are not supported",
                            );
                        }
                    },
                    other => {
                        return self.error(
                            other.span(),
                            "a `let` binds one name: patterns are not supported",
                        );
                    }
                };
                if let Some(init) = &local.init
                    && matches!(&*init.expr, Expr::Struct(_) | Expr::Array(_) | Expr::Repeat(_))
                {
                    let value = match &*init.expr {
                        Expr::Struct(lit) => self.struct_lit(lit, &ident.to_string()),
                        other => self.array_lit(other, &ident.to_string()),
                    };
                    self.scopes
                        .last_mut()
                        .expect("a scope")
                        .insert(ident.to_string(), Kind::Struct);
                    return quote_spanned!(local.span()=> let #ident = #value;);
                }
                if let Some(init) = &local.init
                    && let Some(root) = self.place_root(&init.expr)
                    && matches!(&*init.expr, Expr::Path(_))
                {
                    return self.error(
                        root.span(),
                        "copying a struct is not supported yet: read its fields",
                    );
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
                        // Each branch sets the variable itself: no temporary.
                        let set = self.set_into(&ident, &init.expr);
                        quote_spanned!(local.span()=> let #ident = #p::local_uninit::<#ty>(); #set)
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
            Stmt::Item(syn::Item::Const(c)) => quote!(#c),
            Stmt::Item(item) => {
                self.error(item.span(), "items other than `const` cannot be declared in a probe")
            }
            Stmt::Macro(m) => self.print(&m.mac),
            Stmt::Expr(e, _) => self.expr_stmt(e),
        }
    }

    /// An expression in statement position.
    fn expr_stmt(&mut self, e: &Expr) -> TokenStream {
        let p = p();
        let span = e.span();
        match e {
            Expr::Assign(a) => self.assign(&a.left, None, &a.right, span),
            Expr::Binary(b) if compound(&b.op).is_some() => {
                self.assign(&b.left, compound(&b.op), &b.right, span)
            }
            Expr::If(i) => self.if_stmt(i),
            Expr::ForLoop(f) => self.for_loop(f),
            Expr::While(w) => match bound(&w.attrs) {
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
            },
            Expr::Loop(l) => match bound(&l.attrs) {
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
            },
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
        let p = p();
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

    fn if_stmt(&mut self, i: &syn::ExprIf) -> TokenStream {
        let p = p();
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

    /// `if let Some(v) = MAP.get(&key) { .. } else { .. }`: a lookup, with `v` the value in
    /// place (read-only) in the first branch.
    fn if_let_get(&mut self, i: &syn::ExprIf, lt: &syn::ExprLet, value: bool) -> TokenStream {
        let p = p();
        let shape = "`if let` takes a map lookup: `if let Some(value) = MAP.get(&key) { .. }`";
        let Pat::TupleStruct(ts) = &*lt.pat else { return self.error(lt.pat.span(), shape) };
        let binding =
            match (ts.path.is_ident("Some"), ts.elems.iter().collect::<Vec<_>>().as_slice()) {
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
        let name = map.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        let key = self.by_ref(&m.args[0]);
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
                #p::hash_get(&#map, #name, #key, |#binding| #p::set(__t, #then), || #p::set(__t, #otherwise));
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
        quote_spanned!(i.span()=> #p::hash_get(&#map, #name, #key, |#binding| { #then }, || { #otherwise });)
    }

    /// The path of a method call's receiver when it is a `static` (not a local or the context).
    fn static_receiver<'e>(&self, m: &'e syn::ExprMethodCall) -> Option<&'e syn::Path> {
        match &*m.receiver {
            Expr::Path(r)
                if r.path
                    .get_ident()
                    .is_none_or(|i| self.lookup(&i.to_string()).is_none() && *i != self.ctx) =>
            {
                Some(&r.path)
            }
            _ => None,
        }
    }

    /// A key, value or record passed by reference to a map operation: a place local as it is, a
    /// struct literal in a new buffer, a scalar as its value (stored into a buffer by the
    /// builder).
    fn by_ref(&mut self, e: &Expr) -> TokenStream {
        let Expr::Reference(r) = e else {
            return self.error(e.span(), "pass keys, values and records by reference: `&key`");
        };
        if r.mutability.is_some() {
            return self
                .error(r.span(), "pass keys, values and records by shared reference: `&key`");
        }
        match &*r.expr {
            Expr::Path(path)
                if path.path.get_ident().is_some_and(|i| {
                    matches!(self.lookup(&i.to_string()), Some(Kind::Struct | Kind::Found))
                }) =>
            {
                let ident = path.path.get_ident().expect("checked");
                quote!(#ident)
            }
            Expr::Struct(lit) => self.struct_lit(lit, "struct"),
            e @ (Expr::Array(_) | Expr::Repeat(_)) => self.array_lit(e, "array"),
            other => self.expr(other),
        }
    }

    /// A struct literal, built in a new stack buffer: every field given, nested struct and
    /// array literals stored field by field.
    fn struct_lit(&mut self, lit: &syn::ExprStruct, name: &str) -> TokenStream {
        let p = p();
        if let Some(rest) = &lit.rest {
            return self.error(rest.span(), "give every field: `..` is not supported in probes");
        }
        let path = &lit.path;
        let mut stores = TokenStream::new();
        for f in &lit.fields {
            let member = &f.member;
            self.field_init(quote!(__v.#member), &f.expr, &mut stores);
        }
        quote_spanned!(lit.span()=> {
            let __s = #p::buffer::<#path>(#name);
            #stores
            __s
        })
    }

    /// An array literal (`[a, b, c]` or `[x; N]` with a literal `N`), built in a new stack
    /// buffer of type `[_; N]` whose element type rustc infers.
    fn array_lit(&mut self, e: &Expr, name: &str) -> TokenStream {
        let p = p();
        let len = match e {
            Expr::Array(a) => Some(a.elems.len()),
            Expr::Repeat(r) => match &*r.len {
                Expr::Lit(syn::ExprLit { lit: Lit::Int(n), .. }) => n.base10_parse::<usize>().ok(),
                _ => None,
            },
            _ => None,
        };
        let Some(len) = len else {
            return self
                .error(e.span(), "an array local has a literal length: `[x; 4]` or `[a, b]`");
        };
        let mut stores = TokenStream::new();
        self.field_init(quote!(__v), e, &mut stores);
        quote_spanned!(e.span()=> {
            let __s = #p::buffer::<[_; #len]>(#name);
            #stores
            __s
        })
    }

    fn field_init(&mut self, at: TokenStream, value: &Expr, stores: &mut TokenStream) {
        let p = p();
        match value {
            Expr::Struct(inner) => {
                if let Some(rest) = &inner.rest {
                    self.error(rest.span(), "give every field: `..` is not supported in probes");
                    return;
                }
                for f in &inner.fields {
                    let member = &f.member;
                    self.field_init(quote!(#at.#member), &f.expr, stores);
                }
            }
            Expr::Array(arr) => {
                for (i, elem) in arr.elems.iter().enumerate() {
                    let i = syn::Index::from(i);
                    self.field_init(quote!(#at[#i]), elem, stores);
                }
            }
            Expr::Repeat(r) => {
                let len = match &*r.len {
                    Expr::Lit(syn::ExprLit { lit: Lit::Int(n), .. }) => {
                        n.base10_parse::<usize>().ok()
                    }
                    _ => None,
                };
                let Some(len) = len else {
                    self.error(
                        r.len.span(),
                        "the length of `[x; N]` in a struct literal is a literal",
                    );
                    return;
                };
                for i in 0..len {
                    let i = syn::Index::from(i);
                    self.field_init(quote!(#at[#i]), &r.expr, stores);
                }
            }
            other => {
                let v = self.expr(other);
                stores.extend(quote_spanned!(other.span()=> #p::store_field(__s, |__v| &#at, #v);));
            }
        }
    }

    /// The local at the root of a field or index chain, when it is a struct or a found value.
    fn place_root(&self, e: &Expr) -> Option<Ident> {
        match e {
            Expr::Path(p) => p
                .path
                .get_ident()
                .filter(|i| matches!(self.lookup(&i.to_string()), Some(Kind::Struct | Kind::Found)))
                .cloned(),
            Expr::Field(f) => self.place_root(&f.base),
            Expr::Index(i) => self.place_root(&i.expr),
            Expr::Paren(p) => self.place_root(&p.expr),
            _ => None,
        }
    }

    /// A field or index chain with its root replaced by `__v`; indices must be constants.
    fn field_path(&mut self, e: &Expr) -> TokenStream {
        match e {
            Expr::Path(_) => quote!(__v),
            Expr::Field(f) => {
                let base = self.field_path(&f.base);
                let member = &f.member;
                quote!(#base.#member)
            }
            Expr::Index(i) => {
                let base = self.field_path(&i.expr);
                if !self.is_constant(&i.index) {
                    return self
                        .error(i.index.span(), "index with a constant (a literal or a `const`)");
                }
                let index = &i.index;
                quote!(#base[#index])
            }
            Expr::Paren(p) => self.field_path(&p.expr),
            other => self.error(other.span(), "not a field"),
        }
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop) -> TokenStream {
        let p = p();
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

    /// A map operation on a `static` map, as a statement.
    fn map_call(&mut self, m: &syn::ExprMethodCall) -> TokenStream {
        let p = p();
        let Some(map) = self.static_receiver(m) else {
            return self.error(
                m.span(),
                "method calls are map operations on a `static` map: `COUNTS.fetch_add(&key, 1)`",
            );
        };
        let name = map.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        let args: Vec<&Expr> = m.args.iter().collect();
        let span = m.span();
        match (m.method.to_string().as_str(), args.as_slice()) {
            ("fetch_add", [key @ Expr::Reference(_), delta]) => {
                let key = self.by_ref(key);
                let delta = self.expr(delta);
                quote_spanned!(span=> #p::hash_fetch_add(&#map, #name, #key, #delta);)
            }
            ("fetch_add", [index, delta]) => {
                let (index, delta) = (self.expr(index), self.expr(delta));
                quote_spanned!(span=> #p::array_fetch_add(&#map, #name, #index, #delta);)
            }
            ("fetch_add_field", [key @ Expr::Reference(_), field, delta]) => {
                let key = self.by_ref(key);
                let field = self.field_closure(field);
                let delta = self.expr(delta);
                quote_spanned!(span=> #p::hash_fetch_add_field(&#map, #name, #key, #field, #delta);)
            }
            ("fetch_add_field", [index, field, delta]) => {
                let index = self.expr(index);
                let field = self.field_closure(field);
                let delta = self.expr(delta);
                quote_spanned!(span=> #p::array_fetch_add_field(&#map, #name, #index, #field, #delta);)
            }
            ("insert", [key, value]) => {
                let (key, value) = (self.by_ref(key), self.by_ref(value));
                quote_spanned!(span=> #p::hash_insert(&#map, #name, #key, #value);)
            }
            ("remove", [key]) => {
                let key = self.by_ref(key);
                quote_spanned!(span=> #p::hash_remove(&#map, #name, #key);)
            }
            ("output", [record]) => {
                let record = self.by_ref(record);
                quote_spanned!(span=> #p::ring_output(&#map, #name, #record);)
            }
            (other, _) => self.error(
                m.method.span(),
                format!("`{other}` is not a map operation probes support: `fetch_add`, `fetch_add_field`, `insert`, `remove`, `output`, and `get` in `if let`"),
            ),
        }
    }

    /// The field selector of `fetch_add_field`: a closure `|v| &v.a.b[2]` (one argument, a
    /// reference to a field chain of it with constant indices), passed to rustc as written.
    fn field_closure(&mut self, e: &Expr) -> TokenStream {
        let shape = "the field is a closure `|v| &v.field`";
        let Expr::Closure(c) = e else { return self.error(e.span(), shape) };
        let param = match c.inputs.iter().collect::<Vec<_>>().as_slice() {
            [Pat::Ident(pi)] => pi.ident.clone(),
            _ => return self.error(c.inputs.span(), shape),
        };
        fn chain(e: &Expr, param: &Ident, l: &Lower) -> bool {
            match e {
                Expr::Path(p) => p.path.is_ident(param),
                Expr::Field(f) => chain(&f.base, param, l),
                Expr::Index(i) => l.is_constant(&i.index) && chain(&i.expr, param, l),
                _ => false,
            }
        }
        match &*c.body {
            Expr::Reference(r)
                if r.mutability.is_none()
                    && matches!(&*r.expr, Expr::Field(_) | Expr::Index(_))
                    && chain(&r.expr, &param, self) =>
            {
                quote!(#c)
            }
            other => self.error(other.span(), shape),
        }
    }

    /// Whether `e` is a place expression rooted at the context argument.
    fn rooted_at_ctx(&self, e: &Expr) -> bool {
        match e {
            Expr::Path(p) => p.path.is_ident(&self.ctx),
            Expr::Field(f) => self.rooted_at_ctx(&f.base),
            Expr::Index(i) => self.rooted_at_ctx(&i.expr),
            Expr::Paren(p) => self.rooted_at_ctx(&p.expr),
            _ => false,
        }
    }

    /// The place expression `e` (rooted at the context) with the root replaced by `__c`; array
    /// indices must be constants.
    fn ctx_place(&mut self, e: &Expr) -> TokenStream {
        match e {
            Expr::Path(_) => quote!(__c),
            Expr::Field(f) => {
                let base = self.ctx_place(&f.base);
                let member = &f.member;
                quote!(#base.#member)
            }
            Expr::Index(i) => {
                let base = self.ctx_place(&i.expr);
                if !self.is_constant(&i.index) {
                    return self.error(i.index.span(), "index the context with a constant");
                }
                let index = &i.index;
                quote!(#base[#index])
            }
            Expr::Paren(p) => self.ctx_place(&p.expr),
            other => self.error(other.span(), "not a field of the context"),
        }
    }

    /// An expression, as builder code giving a `Val<T>`.
    pub(crate) fn expr(&mut self, e: &Expr) -> TokenStream {
        let p = p();
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
            Expr::Call(call) => {
                let Expr::Path(path) = &*call.func else {
                    return self.error(span, "only egpu's helpers can be called");
                };
                let name =
                    path.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
                if HELPERS.contains(&name.as_str()) {
                    if !call.args.is_empty() {
                        return self.error(span, format!("`{name}` takes no arguments"));
                    }
                    let f = Ident::new(&name, path.span());
                    return quote_spanned!(span=> #p::helpers::#f());
                }
                if self.helper.as_ref().is_some_and(|h| path.path.is_ident(h)) {
                    return self.error(span, "a helper cannot call itself: probes do not recurse");
                }
                // A function marked `#[egpu::helper]`, inlined; rustc says so when `name` is not
                // one (it has no `__egpu_inline`).
                let args: Vec<TokenStream> = call.args.iter().map(|a| self.expr(a)).collect();
                let callee = &path.path;
                quote_spanned!(span=> #callee::__egpu_inline(#(#args),*))
            }
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
            Expr::Macro(m) => self.error(m.span(), "`egpu::print!` is a statement, not a value"),
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

    /// `match` on an integer: the scrutinee is evaluated once, then the arms are tried in
    /// order as a chain of `if`s. Arms are literals, constants, `|` alternatives, ranges and `_`
    /// (rustc checks, on the twin, that the arms cover every value). As a value, every arm sets
    /// one variable.
    fn match_expr(&mut self, m: &syn::ExprMatch, value: bool) -> TokenStream {
        let p = p();
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
        let p = p();
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

    /// Builder code setting variable `dst` to the value of `e`, with an `if` (or a block) setting
    /// it in each branch rather than through a temporary.
    fn set_into(&mut self, dst: &Ident, e: &Expr) -> TokenStream {
        let p = p();
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

    /// `egpu::print!("format", args..)`: the only macro of probes. The format's placeholders
    /// (`{}`, `{:x}`, `{:#x}`) must match the arguments, six at most.
    fn print(&mut self, mac: &syn::Macro) -> TokenStream {
        let p = p();
        let is_print = mac.path.segments.len() == 2
            && mac.path.segments[0].ident == "egpu"
            && mac.path.segments[1].ident == "print";
        if !is_print {
            return self.error(
                mac.span(),
                "the only macro of probes is `egpu::print!(\"format {}\", value)`",
            );
        }
        let parser = syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated;
        let args = match mac.parse_body_with(parser) {
            Ok(args) => args,
            Err(e) => return self.error(e.span(), e.to_string()),
        };
        let mut args = args.into_iter();
        let Some(Expr::Lit(syn::ExprLit { lit: Lit::Str(format), .. })) = args.next() else {
            return self
                .error(mac.span(), "`egpu::print!` starts with a string literal: the format");
        };
        let args: Vec<Expr> = args.collect();
        match placeholders(&format.value()) {
            None => {
                return self.error(
                    format.span(),
                    "formats take `{}`, `{:x}` and `{:#x}` (and `{{`, `}}` for braces)",
                );
            }
            Some(n) if n != args.len() => {
                return self.error(
                    format.span(),
                    format!("the format has {n} placeholders for {} arguments", args.len()),
                );
            }
            Some(_) if args.len() > 6 => {
                return self.error(mac.span(), "`egpu::print!` takes at most 6 arguments");
            }
            Some(_) => {}
        }
        let values: Vec<TokenStream> = args
            .iter()
            .map(|a| {
                let v = self.expr(a);
                quote_spanned!(a.span()=> #p::print_arg(#v))
            })
            .collect();
        quote_spanned!(mac.span()=> #p::print(#format, &[#(#values),*]);)
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

/// How many arguments a `print!` format takes, or `None` for a brace use it does not know.
fn placeholders(format: &str) -> Option<usize> {
    let mut n = 0;
    let mut rest = format;
    while let Some(i) = rest.find(['{', '}']) {
        rest = &rest[i..];
        let spec = ["{{", "}}", "{}", "{:x}", "{:#x}"].into_iter().find(|s| rest.starts_with(s))?;
        n += usize::from(!matches!(spec, "{{" | "}}"));
        rest = &rest[spec.len()..];
    }
    Some(n)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_formats_count_their_placeholders() {
        assert_eq!(placeholders("no placeholder"), Some(0));
        assert_eq!(placeholders("{} and {:x} and {:#x}"), Some(3));
        assert_eq!(placeholders("{{literal}} {}"), Some(1));
        assert_eq!(placeholders("{:>8}"), None);
        assert_eq!(placeholders("{0}"), None);
    }

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

    #[test]
    fn unsupported_constructs_are_errors_at_their_tokens() {
        let mut lower = Lower::new(syn::parse_quote!(ctx), syn::parse_quote!(Ctx));
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
}
