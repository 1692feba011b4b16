//! Publishing a configuration's ids to an instance's CMI (004 §2.1, §3.2.4): how many fragments
//! the key space is split into, the latest configuration id (stamped on every entry written from
//! now on), and the id of each fragment the instance hosts, below which its entries are obsolete.

use cads_client::{Client, ClientError};
use cads_protocol::{Command, Reply};

use crate::configuration::{Configuration, InstanceId};

/// Sends `instance`'s ids in `config` to its CMI (`instance` is its index among `client`'s CMIs),
/// in one round trip: `FRAGMENTS`, `CONFIGID`, then a `FRAGMENTID` per hosted fragment.
pub fn publish(
    client: &Client,
    config: &Configuration,
    instance: InstanceId,
) -> Result<(), ClientError> {
    let publication = config.publication(instance);
    let mut commands = vec![
        (
            instance,
            Command::Fragments(Some(config.fragments().len() as u32)),
        ),
        (instance, Command::ConfigId(Some(publication.latest))),
    ];
    commands.extend(publication.fragment_ids.iter().map(|&(fragment, id)| {
        let id = Some(id);
        (instance, Command::FragmentId { fragment, id })
    }));
    for reply in client.execute_many(&commands) {
        match reply? {
            Reply::Error(e) => {
                return Err(ClientError::Protocol(format!(
                    "CMI {instance} refused the configuration's ids: {e}"
                )))
            }
            _ => continue,
        }
    }
    Ok(())
}
