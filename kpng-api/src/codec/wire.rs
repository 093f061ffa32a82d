//! The wire form of [`ViewOp`]s (`kpng.model.v1.ViewChange`), as the ENLS
//! watch service streams them.

use std::sync::Arc;

use kpng_model::v1::{self, view_change::Change};
use kpng_model::view::{EndpointView, ViewOp};
use kpng_model::{Error, ServiceInfo, ServiceName};

pub(super) fn service_ref(name: &ServiceName) -> v1::ServiceRef {
    v1::ServiceRef {
        namespace: name.namespace().to_owned(),
        name: name.name().to_owned(),
    }
}

pub(super) fn service_name(r: Option<&v1::ServiceRef>) -> Result<ServiceName, Error> {
    let r = r.ok_or_else(|| missing("service"))?;
    Ok(ServiceName::new(&r.namespace, &r.name))
}

fn missing(field: &str) -> Error {
    Error::InvalidAddress {
        field: format!("ViewChange.{field}"),
        value: "missing".into(),
    }
}

fn ip(field: &str, text: &str) -> Result<std::net::IpAddr, Error> {
    text.parse().map_err(|_| Error::InvalidAddress {
        field: format!("ViewChange.{field}"),
        value: text.to_owned(),
    })
}

/// The wire form of an op.
pub fn to_wire(op: &ViewOp) -> v1::ViewChange {
    let change = match op {
        ViewOp::SetNode(node) => Change::SetNode((**node).clone()),
        ViewOp::DeleteNode => Change::DeleteNode(true),
        ViewOp::SetServiceCidrs(cidrs) => Change::SetServiceCidrs((**cidrs).clone()),
        ViewOp::SetService(svc) => Change::SetService(svc.service().clone()),
        ViewOp::DeleteService(name) => Change::DeleteService(service_ref(name)),
        ViewOp::SetEndpoint(name, ep) => Change::SetEndpoint(v1::SetEndpoint {
            service: Some(service_ref(name)),
            endpoint: Some(v1::EndpointRef {
                ip: ep.ip().to_string(),
                endpoint: Some(ep.endpoint().to_proto()),
                is_local: ep.is_local(),
                cluster: ep.cluster(),
                local: ep.local(),
            }),
        }),
        ViewOp::DeleteEndpoint(name, addr) => Change::DeleteEndpoint(v1::DeleteEndpoint {
            service: Some(service_ref(name)),
            ip: addr.to_string(),
        }),
    };
    v1::ViewChange {
        change: Some(change),
    }
}

/// The op a wire change stands for.
///
/// # Errors
/// [`Error::InvalidAddress`] naming a missing part or a bad address,
/// [`Error::InvalidServiceAddress`] a Service's: the peer is not trusted.
pub fn from_wire(change: v1::ViewChange) -> Result<ViewOp, Error> {
    Ok(match change.change.ok_or_else(|| missing("change"))? {
        Change::SetNode(node) => ViewOp::SetNode(Arc::new(node)),
        Change::DeleteNode(_) => ViewOp::DeleteNode,
        Change::SetServiceCidrs(cidrs) => ViewOp::SetServiceCidrs(Arc::new(cidrs)),
        Change::SetService(svc) => ViewOp::SetService(Arc::new(ServiceInfo::new(svc)?)),
        Change::DeleteService(r) => ViewOp::DeleteService(service_name(Some(&r))?),
        Change::SetEndpoint(set) => {
            let name = service_name(set.service.as_ref())?;
            let ep = set
                .endpoint
                .ok_or_else(|| missing("set_endpoint.endpoint"))?;
            let ip = ip("set_endpoint.endpoint.ip", &ep.ip)?;
            let endpoint =
                kpng_model::EndpointInfo::from_keyed_proto(ip, ep.endpoint.unwrap_or_default())?;
            // Keyed at `ip`: always one of its addresses.
            let view = EndpointView::at(endpoint, ip)
                .ok_or_else(|| missing("set_endpoint.endpoint.ip"))?
                .with_is_local(ep.is_local)
                .with_cluster(ep.cluster)
                .with_local(ep.local);
            ViewOp::SetEndpoint(name, view)
        }
        Change::DeleteEndpoint(del) => ViewOp::DeleteEndpoint(
            service_name(del.service.as_ref())?,
            ip("delete_endpoint.ip", &del.ip)?,
        ),
        Change::SetEndpoints(_) => {
            return Err(Error::InvalidAddress {
                field: "ViewChange.set_endpoints".into(),
                value: "compact: decode its batch with codec::compact::Decoder".into(),
            });
        }
    })
}
