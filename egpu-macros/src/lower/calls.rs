//! Calls: map operations on `static` maps (as statements), egpu's helpers, and functions marked
//! `#[egpu::helper]` (inlined); the keys, values and records passed to map operations.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident, Pat};

use super::{Kind, Lower};

/// The helpers a probe may call, by name, with how many arguments each takes.
const HELPERS: [(&str, usize); 11] = [
    ("ktime_ns", 0),
    ("cpu_id", 0),
    ("prandom_u32", 0),
    ("warp_lanes", 0),
    ("warp_leader", 0),
    ("warp_sectors", 2),
    ("warp_peers", 1),
    ("warp_stride", 1),
    ("delay_ns", 1),
    ("delay_ns_since", 2),
    ("clock", 0),
];

impl Lower {
    /// The path of a method call's receiver when it is a `static` (not a local or the context).
    pub(super) fn static_receiver<'e>(&self, m: &'e syn::ExprMethodCall) -> Option<&'e syn::Path> {
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
    pub(super) fn by_ref(&mut self, e: &Expr) -> TokenStream {
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

    /// A map operation on a `static` map, as a statement.
    pub(super) fn map_call(&mut self, m: &syn::ExprMethodCall) -> TokenStream {
        let p = self.builder();
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
            ("set", [index, value]) => {
                let (index, value) = (self.expr(index), self.by_ref(value));
                quote_spanned!(span=> #p::array_set(&#map, #name, #index, #value);)
            }
            ("remove", [key]) => {
                let key = self.by_ref(key);
                quote_spanned!(span=> #p::hash_remove(&#map, #name, #key);)
            }
            ("output", [record]) => {
                let record = self.by_ref(record);
                quote_spanned!(span=> #p::ring_output(&#map, #name, #record);)
            }
            ("output_warp", [record]) => {
                let record = self.by_ref(record);
                quote_spanned!(span=> #p::ring_output_warp(&#map, #name, #record);)
            }
            (other, _) => self.error(
                m.method.span(),
                format!("`{other}` is not a map operation probes support: `fetch_add`, `fetch_add_field`, `insert`, `set`, `remove`, `output`, `output_warp`, and `get` in `if let`"),
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

    /// A call: one of egpu's helpers (`egpu::helpers::ktime_ns()`), or a function marked
    /// `#[egpu::helper]`, inlined.
    pub(super) fn call(&mut self, call: &syn::ExprCall) -> TokenStream {
        let p = self.builder();
        let span = call.span();
        let Expr::Path(path) = &*call.func else {
            return self.error(span, "only egpu's helpers can be called");
        };
        let name = path.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        if let Some(&(_, arity)) = HELPERS.iter().find(|(h, _)| *h == name) {
            if call.args.len() != arity {
                let takes = match arity {
                    0 => "no arguments".to_string(),
                    1 => "1 argument".to_string(),
                    n => format!("{n} arguments"),
                };
                return self.error(span, format!("`{name}` takes {takes}"));
            }
            let args: Vec<TokenStream> = call.args.iter().map(|a| self.expr(a)).collect();
            let f = Ident::new(&name, path.span());
            return quote_spanned!(span=> #p::helpers::#f(#(#args),*));
        }
        if self.helper.as_ref().is_some_and(|h| path.path.is_ident(h)) {
            return self.error(span, "a helper cannot call itself: probes do not recurse");
        }
        if let Some(message) = not_callable(&path.path) {
            return self.error(path.span(), message);
        }
        // A function marked `#[egpu::helper]`, inlined; rustc says so when `name` is not
        // one (it has no `__egpu_inline`).
        let args: Vec<TokenStream> = call.args.iter().map(|a| self.expr(a)).collect();
        let callee = &path.path;
        quote_spanned!(span=> #callee::__egpu_inline(#(#args),*))
    }
}

/// Why a call of `path` cannot be in a probe, when its path says so: an associated function of
/// a type (`Vec::new`, `u64::max`) or a function of the standard library. Other names may be
/// functions marked `#[egpu::helper]`, which rustc checks.
fn not_callable(path: &syn::Path) -> Option<String> {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let shown = segments.join("::");
    if let Some(heap) = segments.iter().find(|s| HEAP_TYPES.contains(&s.as_str())) {
        return Some(format!(
            "`{shown}` allocates on the heap, which probes cannot: eBPF has a 512-byte stack and \
             maps (`{heap}` has no place in Probe Rust; keep data in a `static` map or a \
             fixed-size array)"
        ));
    }
    let std = matches!(segments.first().map(String::as_str), Some("std" | "core" | "alloc"));
    let type_segment =
        segments.iter().rev().skip(1).find(|s| {
            s.starts_with(|c: char| c.is_ascii_uppercase()) || crate::probe::is_primitive(s)
        });
    match (std, type_segment) {
        (_, Some(ty)) => Some(format!(
            "`{shown}` cannot be called from a probe: associated functions of types (`{ty}`) are \
             not Probe Rust; probes call egpu's helpers and functions marked `#[egpu::helper]`"
        )),
        (true, None) => Some(format!(
            "`{shown}` cannot be called from a probe: the standard library is not Probe Rust; \
             probes call egpu's helpers and functions marked `#[egpu::helper]`"
        )),
        (false, None) => None,
    }
}

/// Types and macros that allocate on the heap, which the errors name as such.
const HEAP_TYPES: [&str; 11] = [
    "Vec",
    "Box",
    "String",
    "Rc",
    "Arc",
    "VecDeque",
    "BTreeMap",
    "BTreeSet",
    "BinaryHeap",
    "LinkedList",
    "vec",
];
