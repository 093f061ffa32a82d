//! Where the service is served and reached: a unix socket, or TCP with
//! mutual TLS.

use std::path::{Path, PathBuf};

use kpng_model::v1::enls_client::EnlsClient;

use crate::Error;
use crate::conn;
use crate::server::Server;

/// Binds a unix socket at `path` (replacing a stale one), mode 0600.
/// Call it from within a tokio runtime.
///
/// # Errors
/// When the socket cannot be made.
pub fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, Error> {
    use std::os::unix::fs::PermissionsExt;
    let socket_error = |source| Error::Socket {
        path: path.display().to_string(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path).map_err(socket_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(socket_error)?;
    Ok(listener)
}

/// Serves `server` on a unix socket at `path` ([`bind_unix`], then
/// [`serve`]) until the task is dropped.
///
/// # Errors
/// When the socket cannot be made, or the transport fails.
pub async fn serve_unix(path: PathBuf, server: Server) -> Result<(), Error> {
    serve(bind_unix(&path)?, server).await
}

/// PEM material for mutual TLS over TCP: this side's certificate and key,
/// and the CA that signs the other side's.
#[derive(Clone)]
pub struct Tls {
    /// This side's certificate chain (PEM).
    pub cert: String,
    /// This side's private key (PEM).
    pub key: String,
    /// The CA certificate the peer's certificate must chain to (PEM).
    pub ca: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the three PEM files.
    ///
    /// # Errors
    /// [`Error::Socket`] naming the file that cannot be read.
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self, Error> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| Error::Socket {
                path: path.display().to_string(),
                source,
            })
        };
        Ok(Self {
            cert: read(cert)?,
            key: read(key)?,
            ca: read(ca)?,
        })
    }
}

/// Where a server listens, or an agent connects.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Address {
    /// A unix socket (the default; mode 0600 when served).
    Unix(PathBuf),
    /// TCP, always with mutual TLS.
    Tcp {
        /// `host:port`.
        addr: String,
        /// The name the server's certificate must carry (agents).
        domain: String,
        /// The TLS material.
        tls: Tls,
    },
}

impl std::fmt::Display for Address {
    /// As it is written on the command line: `unix:///path`,
    /// `tcp://host:port`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(path) => write!(f, "unix://{}", path.display()),
            Address::Tcp { addr, .. } => write!(f, "tcp://{addr}"),
        }
    }
}

impl Address {
    /// Parses `unix:///path` (or a bare path) or `tcp://host:port`; TCP
    /// needs `tls`.
    ///
    /// # Errors
    /// [`Error::Address`] naming what is wrong.
    pub fn parse(uri: &str, tls: Option<Tls>) -> Result<Self, Error> {
        if let Some(addr) = uri.strip_prefix("tcp://") {
            let tls = tls.ok_or_else(|| {
                Error::Address(format!(
                    "{uri}: TCP needs mutual TLS (certificate, key and CA)"
                ))
            })?;
            let domain = addr
                .rsplit_once(':')
                .map_or(addr, |(host, _)| host)
                .trim_matches(['[', ']'])
                .to_owned();
            return Ok(Address::Tcp {
                addr: addr.to_owned(),
                domain,
                tls,
            });
        }
        match uri.strip_prefix("unix://") {
            Some(path) => Ok(Address::Unix(PathBuf::from(path))),
            None if uri.contains("://") => Err(Error::Address(format!(
                "{uri}: use unix:///path or tcp://host:port"
            ))),
            None => Ok(Address::Unix(PathBuf::from(uri))),
        }
    }
}

/// Serves `server` on TCP with mutual TLS until the task is dropped: a
/// client without a certificate signed by `tls.ca` is refused during the
/// handshake. Each connection is held to the server's
/// [`Limits`](crate::Limits): its handshake and HTTP/2 preface must come
/// within `preface_timeout`; a client that breaks the protocol is closed
/// and logged once, naming its address.
///
/// # Errors
/// [`Error::Tls`] when the TLS material is unusable.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    server: Server,
    tls: &Tls,
) -> Result<(), Error> {
    let acceptor = conn::tls_acceptor(tls)?;
    conn::serve_tls(listener, server, acceptor).await;
    Ok(())
}

/// Serves `server` at `address` until the task is dropped.
///
/// # Errors
/// When the address cannot be bound, or the transport fails.
pub async fn serve_at(address: &Address, server: Server) -> Result<(), Error> {
    match address {
        Address::Unix(path) => serve(bind_unix(path)?, server).await,
        Address::Tcp { addr, tls, .. } => {
            let listener =
                tokio::net::TcpListener::bind(addr.as_str())
                    .await
                    .map_err(|source| Error::Socket {
                        path: addr.clone(),
                        source,
                    })?;
            serve_tcp(listener, server, tls).await
        }
    }
}

/// Connects to a server.
///
/// # Errors
/// When it cannot be reached, or (TCP) the TLS handshake fails.
pub async fn connect(address: &Address) -> Result<EnlsClient<tonic::transport::Channel>, Error> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    match address {
        Address::Unix(path) => connect_unix(path).await,
        Address::Tcp { addr, domain, tls } => {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca))
                .identity(Identity::from_pem(&tls.cert, &tls.key))
                .domain_name(domain.clone());
            let channel = Endpoint::from_shared(format!("https://{addr}"))
                .map_err(|e| Error::Address(format!("{addr}: {e}")))?
                .tls_config(config)?
                .connect()
                .await?;
            Ok(EnlsClient::new(channel))
        }
    }
}

/// Serves `server` on a bound unix socket until the task is dropped.
///
/// Clients of any gRPC implementation are served: grpc-core's (Python,
/// C++, Ruby…) name the socket path as the request's `:authority`, which
/// the HTTP/2 server cannot parse, and is shown `localhost` instead. Each
/// connection is held to the server's [`Limits`](crate::Limits); a
/// client that breaks the protocol is closed and logged once, naming its
/// pid and uid (`SO_PEERCRED`).
///
/// # Errors
/// None today: the result is kept for the transports that can fail.
pub async fn serve(listener: tokio::net::UnixListener, server: Server) -> Result<(), Error> {
    conn::serve_unix(listener, server).await;
    Ok(())
}

/// Connects to a server's unix socket.
///
/// # Errors
/// When it cannot be reached.
pub async fn connect_unix(path: &Path) -> Result<EnlsClient<tonic::transport::Channel>, Error> {
    Ok(EnlsClient::new(connect_unix_channel(path).await?))
}

/// Connects to a server's unix socket, giving the bare channel: for a
/// client of its own making (another codec, say, as the fan-out bench's
/// watchers that only receive), or several generated clients on one
/// connection.
///
/// # Errors
/// When it cannot be reached.
pub async fn connect_unix_channel(path: &Path) -> Result<tonic::transport::Channel, Error> {
    let path = path.to_owned();
    // The URI is required by the API but unused: the connector dials.
    let channel = tonic::transport::Endpoint::from_static("http://kpng.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(channel)
}
