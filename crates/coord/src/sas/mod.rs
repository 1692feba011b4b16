//! The SAS core (001 §3.3, Fig. 1.b): with the cache inside each application process, a
//! coordinator grants the I and Q leases and knows which AppNodes hold a copy of each key, so
//! that a write reaches every copy before it is acknowledged. [`leases`] is its tables,
//! [`core`] the service, [`crate::wire`] the frames both sides speak; the AppNode side is `cads::sas`.

pub mod core;
pub mod leases;

pub use self::core::Core;
pub use leases::Settings;
