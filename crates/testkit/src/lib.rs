//! What cads' tests share, so that no test file sets up a deployment of its own.
//!
//! - [`cmis`]: CMIs started in this process on free loopback ports ([`Cmis`]), or as `cads
//!   server` / `cads-server` / `redis-server` processes killed on drop ([`ServerProcess`]).
//! - [`scratch`]: a temporary directory, a SQLite data store in it, and PostgreSQL / MariaDB
//!   databases of unique names dropped afterwards; the URLs of the local servers.
//! - [`Relay`] (from `cads_store`): a TCP relay that cuts connections on demand, as a network
//!   partition would.
//! - [`private_postgres`]: a PostgreSQL server of a test's own, to stop and freeze.
//! - [`resp`]: a raw RESP connection that hands back replies byte for byte.
//! - [`failpoints`]: the scenario lock, stalls and deaths at cads' failpoints.
//! - [`tls`]: a CA made by the test, with a CMI and a client certificate it signed.
//! - [`services`]: loud skipping when a server or tool is absent, a failure instead under
//!   `CADS_REQUIRE_SERVICES=1` (CI).
//!
//! It is a dev-dependency only: it turns on cads' `failpoints` feature.

pub mod cmis;
pub mod documents;
pub mod failpoints;
pub mod private_postgres;
pub mod resp;
pub mod scratch;
pub mod services;
pub mod tls;
pub mod tokens;

pub use cads_server::Options as CmiOptions;
pub use cads_store::Relay;
pub use cmis::{free_port, free_ports, Cmis, ServerProcess};
pub use private_postgres::PrivatePostgres;
pub use resp::RespConn;
pub use scratch::{ScratchDatabase, ScratchDir};
pub use tls::TestCa;
