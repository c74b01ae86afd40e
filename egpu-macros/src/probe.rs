//! The attribute and the signature of a probe, and the items `#[egpu::probe]` emits:
//!
//! - the function itself, as native Rust with the probe's arithmetic (its twin);
//! - a type of the same name (in the type namespace, so it does not clash with the function)
//!   whose `probe()` returns the [`Probe`]: it builds the IR by running the lowered body, once.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

use egpu_ebpf::{AttachPoint, ParseAttachError};

use crate::args::Krate;
use crate::lower::Lower;

/// Errors of one probe, reported together.
#[derive(Default)]
pub(crate) struct Errors(pub(crate) Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        let e = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub(crate) fn into_result(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The attach point's text: `host::launch`, `host::launch::exit`, `device::global_load`, `user`.
fn attach_text(attr: TokenStream) -> syn::Result<String> {
    let text: String = attr.to_string().chars().filter(|c| !c.is_whitespace()).collect();
    if text.is_empty() {
        return Err(syn::Error::new(
            Span::call_site(),
            "name the attach point: `#[egpu::probe(host::launch)]`, `#[egpu::probe(device::global_load)]`, `#[egpu::probe(user)]`",
        ));
    }
    parse_attach(&text).map_err(|e| syn::Error::new_spanned(&attr, e))?;
    Ok(text)
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let func: ItemFn = syn::parse2(item)?;
    // A malformed option is reported with the body's errors; the stubs then name `::egpu`.
    let (attach, krate) = match crate::args::parse(attr) {
        Ok(args) => (attach_text(args.attach), args.krate),
        Err(e) => (Err(e), Krate::default()),
    };
    Ok(expand_fn(attach, &krate, &func).unwrap_or_else(|e| stubs(&func, &krate, e)))
}

/// The errors, and stubs of the function and its probe, so that the user sees these errors and
/// none from the body as written or from code that uses the probe.
fn stubs(func: &ItemFn, krate: &Krate, e: syn::Error) -> TokenStream {
    let e = e.into_compile_error();
    let (attrs, vis, sig, name) = (&func.attrs, &func.vis, &func.sig, &func.sig.ident);
    let egpu = krate.at(Span::call_site());
    quote! {
        #e
        #(#attrs)*
        #[allow(unused_variables)]
        #vis #sig { ::core::unreachable!() }
        #[allow(non_camel_case_types)]
        #vis struct #name {}
        impl #name {
            #[allow(dead_code)]
            #vis fn probe() -> &'static #egpu::probe::Probe { ::core::unreachable!() }
        }
    }
}

fn expand_fn(
    attach: syn::Result<String>,
    krate: &Krate,
    func: &ItemFn,
) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let attach = match attach {
        Ok(a) => a,
        Err(e) => {
            errors.0 = Some(e);
            String::new()
        }
    };
    let sig = &func.sig;
    if let Some(g) = sig.generics.params.first() {
        errors.push(g.span(), "a probe cannot be generic");
    }
    for (kw, span) in [
        (sig.asyncness.is_some(), sig.asyncness.span()),
        (sig.unsafety.is_some(), sig.unsafety.span()),
        (sig.constness.is_some(), sig.constness.span()),
    ] {
        if kw {
            errors.push(span, "a probe is a plain `fn`");
        }
    }
    // One argument: a shared reference to the context.
    let (ctx_ident, ctx_ty) = match sig.inputs.iter().collect::<Vec<_>>().as_slice() {
        [FnArg::Typed(arg)] => {
            let ident = match &*arg.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.mutability.is_none() => {
                    Some(p.ident.clone())
                }
                other => {
                    errors.push(other.span(), "name the context argument (`ctx: &LaunchCtx`)");
                    None
                }
            };
            let ty = match &*arg.ty {
                Type::Reference(r) if r.mutability.is_none() || attach == "user" => {
                    Some((*r.elem).clone())
                }
                Type::Reference(r) => {
                    errors.push(
                        r.span(),
                        "only a user context is writable: take `&` for this attach point",
                    );
                    None
                }
                other => {
                    errors.push(
                        other.span(),
                        "the context is passed by reference: `ctx: &LaunchCtx`",
                    );
                    None
                }
            };
            (ident, ty)
        }
        _ => {
            errors.push(
                sig.inputs.span(),
                "a probe takes one argument, a reference to its context (`ctx: &LaunchCtx`)",
            );
            (None, None)
        }
    };
    let returns = match &sig.output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => {
            if !is_integer_type(ty) {
                errors.push(ty.span(), "a probe returns nothing or an integer");
            }
            true
        }
    };
    let (Some(ctx_ident), Some(ctx_ty)) = (ctx_ident, ctx_ty) else {
        errors.into_result()?;
        unreachable!("an error was recorded");
    };

    let mut lower = Lower::new(ctx_ident.clone(), ctx_ty.clone(), krate);
    let built = lower.body(&func.block, returns);
    let twin = crate::twin::twin(func, krate);
    for (span, message) in lower.errors {
        errors.push(span, message);
    }
    errors.into_result()?;
    let vis = &func.vis;
    let name = &sig.ident;

    let name_text = name.to_string();
    let doc =
        format!("The probe compiled from the function [`{name}`] by `#[egpu::probe({attach})]`.");
    let p = krate.builder();
    let build_fn = format_ident!("__egpu_build");
    let span = sig.ident.span();
    let egpu = krate.at(span);
    let context_check = context_check(&attach, &ctx_ty, krate);
    let handle = quote_spanned! {span=>
        #[doc = #doc]
        #[allow(non_camel_case_types)]
        #vis struct #name {}

        impl #name {
            /// The probe: its program, maps, and a CPU VM to run it.
            #[allow(dead_code, clippy::all)]
            #vis fn probe() -> &'static #egpu::probe::Probe {
                fn __egpu_attach() -> ::core::result::Result<#egpu::ebpf::AttachPoint, #egpu::probe::BuildError> {
                    #context_check
                    #p::attach_point::<#ctx_ty>(#attach)
                }
                #[allow(unused_variables, unused_mut, unused_parens, unreachable_code, clippy::all)]
                fn #build_fn() {
                    #p::at(::core::file!(), ::core::line!(), ::core::column!());
                    #built
                }
                static PROBE: #egpu::probe::Probe =
                    #egpu::probe::Probe::new(#name_text, __egpu_attach, #build_fn);
                &PROBE
            }
        }
    };
    Ok(quote! { #twin #handle })
}

/// The attach point `text` names (`host::EVENT` is its entry), `None` for `user`, whose size is
/// the context type's.
fn parse_attach(text: &str) -> Result<Option<AttachPoint>, ParseAttachError> {
    match text {
        "user" => Ok(None),
        t if t.starts_with("host::") && t.matches("::").count() == 1 => {
            format!("{t}::enter").parse().map(Some)
        }
        t => t.parse().map(Some),
    }
}

/// Code that makes rustc refuse a context type other than the one the attach point passes, at
/// the user's type, naming both: `device::global_load probes take `&MemAccessCtx`, not
/// `&LaunchCtx``. A trait implemented by the expected type alone (so another name for it, a
/// `type` alias or a re-export, is accepted), whose message the macro writes. The expected type
/// is the one `AttachPoint::context_name` gives, under `PATH::ebpf`. Nothing for `user`.
fn context_check(spec: &str, ctx_ty: &Type, krate: &Krate) -> TokenStream {
    let Ok(Some(attach)) = parse_attach(spec) else { return TokenStream::new() };
    let expected = attach.context_name();
    let span = ctx_ty.span();
    let ident = syn::Ident::new(expected, span);
    let egpu = krate.at(span);
    let message = format!("`{spec}` probes take `&{expected}`, not `&{{Self}}`");
    let label = format!("expected `&{expected}`");
    // Named after the expected type, so that rustc does not point at the trait of the same name
    // another probe's type implements.
    let check = format_ident!("__EgpuTakes{expected}", span = span);
    quote_spanned! {span=>
        #[diagnostic::on_unimplemented(message = #message, label = #label)]
        trait #check {
            type Checked;
        }
        impl #check for #egpu::ebpf::#ident {
            type Checked = ();
        }
        let _: <#ctx_ty as #check>::Checked = ();
    }
}

/// Whether `name` is one of Rust's primitive types.
pub(crate) fn is_primitive(name: &str) -> bool {
    matches!(
        name,
        "u8" | "u16"
            | "u32"
            | "u64"
            | "u128"
            | "usize"
            | "i8"
            | "i16"
            | "i32"
            | "i64"
            | "i128"
            | "isize"
            | "bool"
            | "char"
            | "str"
            | "f32"
            | "f64"
    )
}

/// Whether `ty` names one of the integer types.
pub(crate) fn is_integer_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.get_ident().is_some_and(|i| {
        matches!(i.to_string().as_str(), "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize")
    }))
}
