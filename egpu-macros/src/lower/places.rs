//! Places: struct and array literals built in stack buffers, and the field and index chains
//! read and written through struct locals, looked-up values and the context.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit};

use super::{Kind, Lower};

impl Lower {
    /// A struct literal, built in a new stack buffer: every field given, nested struct and
    /// array literals stored field by field.
    pub(super) fn struct_lit(&mut self, lit: &syn::ExprStruct, name: &str) -> TokenStream {
        let p = self.builder();
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
    pub(super) fn array_lit(&mut self, e: &Expr, name: &str) -> TokenStream {
        let p = self.builder();
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
        if let Some(message) = too_large(e, len) {
            return self.error(e.span(), message);
        }
        let mut stores = TokenStream::new();
        self.field_init(quote!(__v), e, &mut stores);
        quote_spanned!(e.span()=> {
            let __s = #p::buffer::<[_; #len]>(#name);
            #stores
            __s
        })
    }

    fn field_init(&mut self, at: TokenStream, value: &Expr, stores: &mut TokenStream) {
        let p = self.builder();
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
    pub(super) fn place_root(&self, e: &Expr) -> Option<Ident> {
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
    pub(super) fn field_path(&mut self, e: &Expr) -> TokenStream {
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

    /// Whether `e` is a place expression rooted at the context argument.
    pub(super) fn rooted_at_ctx(&self, e: &Expr) -> bool {
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
    pub(super) fn ctx_place(&mut self, e: &Expr) -> TokenStream {
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
}

/// eBPF's stack, in bytes: every local of a probe lives on it.
const STACK_BYTES: usize = 512;

/// Why the array literal `e` of `len` elements cannot be a probe's local, when the macro can
/// tell: more elements than the stack has bytes, or, when the elements are literals with a
/// suffix (`0u64`), more bytes than the stack. (The builder refuses a stack over 512 bytes in
/// all, naming the largest locals, when the probe is built.)
fn too_large(e: &Expr, len: usize) -> Option<String> {
    if len > STACK_BYTES {
        return Some(format!(
            "an array of {len} elements does not fit a probe's stack: eBPF's stack is \
             {STACK_BYTES} bytes, so an array local has at most {STACK_BYTES} elements (of `u8`), \
             {} of `u64`; keep more in a map",
            STACK_BYTES / 8
        ));
    }
    let first = match e {
        Expr::Array(a) => a.elems.first(),
        Expr::Repeat(r) => Some(&*r.expr),
        _ => None,
    };
    let Some(Expr::Lit(syn::ExprLit { lit: Lit::Int(n), .. })) = first else { return None };
    let size: usize = match n.suffix() {
        "u8" | "i8" => 1,
        "u16" | "i16" => 2,
        "u32" | "i32" => 4,
        "u64" | "i64" | "usize" | "isize" => 8,
        _ => return None,
    };
    let bytes = len * size;
    (bytes > STACK_BYTES).then(|| {
        format!(
            "this array of {len} `{}` is {bytes} bytes, more than a probe's stack: eBPF's stack \
             is {STACK_BYTES} bytes, so an array local holds at most {} `{}`; keep more in a map",
            n.suffix(),
            STACK_BYTES / size,
            n.suffix()
        )
    })
}
