//! `#[egpu::helper]`: a function probes call, inlined into each probe that calls it.
//!
//! The function stays native Rust (the twin's version of its body), and a type of the same name
//! gets `__egpu_inline`, which takes the arguments as builder handles and records the body's IR
//! where the probe calls it: inlining, done by running the lowered body at the call site.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

use crate::lower::Lower;
use crate::probe::{Errors, is_integer_type};

fn is_scalar(ty: &Type) -> bool {
    is_integer_type(ty) || matches!(ty, Type::Path(p) if p.path.is_ident("bool"))
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args = crate::args::parse(attr)?;
    if !args.attach.is_empty() {
        return Err(syn::Error::new_spanned(
            args.attach,
            "`#[egpu::helper]` takes no arguments but the option `crate = PATH`",
        ));
    }
    let krate = &args.krate;
    let p = krate.builder();
    let func: ItemFn = syn::parse2(item)?;
    let mut errors = Errors::default();
    let sig = &func.sig;
    if let Some(g) = sig.generics.params.first() {
        errors.push(g.span(), "a helper cannot be generic");
    }
    if sig.asyncness.is_some() || sig.unsafety.is_some() || sig.constness.is_some() {
        errors.push(sig.fn_token.span(), "a helper is a plain `fn`");
    }
    // A dummy context: helpers see no context.
    let mut lower = Lower::new(format_ident!("__egpu_no_context"), syn::parse_quote!(()), krate);
    let mut params = Vec::new();
    let mut rebinds = TokenStream::new();
    for arg in &sig.inputs {
        let FnArg::Typed(arg) = arg else {
            errors.push(arg.span(), "a helper takes integer or `bool` arguments");
            continue;
        };
        let Pat::Ident(pi) = &*arg.pat else {
            errors.push(arg.pat.span(), "name each argument");
            continue;
        };
        if !is_scalar(&arg.ty) {
            errors.push(arg.ty.span(), "a helper takes integer or `bool` arguments (for now)");
            continue;
        }
        let (ident, ty) = (&pi.ident, &arg.ty);
        params.push(quote!(#ident: #p::Val<#ty>));
        if pi.mutability.is_some() {
            rebinds.extend(quote!(let #ident = #p::local(#ident);));
            lower.declare_local(ident);
        } else {
            lower.declare_value(ident);
        }
    }
    let (ret, returns) = match &sig.output {
        ReturnType::Default => (quote!(()), false),
        ReturnType::Type(_, ty) if is_scalar(ty) => (quote!(#p::Val<#ty>), true),
        ReturnType::Type(_, ty) => {
            errors.push(ty.span(), "a helper returns nothing, an integer or a `bool`");
            (quote!(()), false)
        }
    };
    let name = &sig.ident;
    let body = lower.helper_body(&func.block, returns, name);
    for (span, message) in lower.errors {
        errors.push(span, message);
    }
    let twin = crate::twin::twin(&func, krate);
    let vis = &func.vis;
    if let Err(e) = errors.into_result() {
        // The errors, and a stub of the function, so that nothing else is reported.
        let (e, attrs) = (e.into_compile_error(), &func.attrs);
        return Ok(quote! {
            #e
            #(#attrs)*
            #[allow(unused_variables)]
            #vis #sig { ::core::unreachable!() }
        });
    }
    let name_text = name.to_string();
    Ok(quote_spanned! {name.span()=>
        #twin
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #vis struct #name {}
        impl #name {
            #[doc(hidden)]
            #[allow(unused_variables, unused_mut, unused_parens, unreachable_code, clippy::all)]
            #vis fn __egpu_inline(#(#params),*) -> #ret {
                let ::core::option::Option::Some(__guard) = #p::Inline::enter(#name_text) else {
                    return #p::Placeholder::placeholder();
                };
                #rebinds
                #body
            }
        }
    })
}
