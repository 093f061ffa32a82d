//! The wire codecs of node-view ops ([`ViewOp`](kpng_model::view::ViewOp)),
//! as the ENLS watch streams them.
//!
//! - [`wire`]: one op as one `kpng.model.v1.ViewChange` and back;
//! - [`compact`]: batches of ops as `kpng.model.v1.ViewChanges`, endpoints
//!   in compact form (addresses as bytes, flags as bits, strings and port
//!   lists as indices into tables sent once per round).
//!
//! The messages themselves are kpng-model's (generated from its `.proto`
//! files); decoding refuses what an untrusted peer gets wrong with a
//! [`kpng_model::Error`] naming it.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//!
//! use kpng_api::codec::compact::{Decoder, Encoder};
//! use kpng_model::ServiceInfo;
//! use kpng_model::v1::Service;
//! use kpng_model::view::ViewOp;
//!
//! let web = ServiceInfo::new(Service::new("default", "web"))?;
//! let ops = [ViewOp::SetService(Arc::new(web))];
//! let batch = Encoder::new().batch(&ops);
//! let mut decoded = Vec::new();
//! Decoder::new().batch::<kpng_model::Error>(batch, |op| {
//!     decoded.push(op);
//!     Ok(())
//! })?;
//! assert_eq!(decoded, ops);
//! # Ok::<(), kpng_model::Error>(())
//! ```

pub mod compact;
pub mod wire;
