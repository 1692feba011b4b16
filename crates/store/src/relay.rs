//! A TCP relay in front of a server that can cut every connection through it, and refuse new ones,
//! while the server keeps running with its state: a network partition between a client and one
//! server, which killing the server cannot imitate. Benchmarks put one between themselves and a
//! networked data store to make it unreachable for a while (`--outage`); tests put one in front of
//! a CMI or a data store.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A relay to one target address. Its threads end with the process; the listener stays open.
pub struct Relay {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    /// Listens on a free loopback port and relays every connection to `target`.
    ///
    /// # Panics
    /// If no loopback port can be bound ([`Relay::start`] returns the error instead).
    pub fn new(target: SocketAddr) -> Relay {
        Relay::start(target).expect("bind the relay")
    }

    /// Listens on a free loopback port and relays every connection to `target`.
    pub fn start(target: SocketAddr) -> std::io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (cut2, conns2) = (cut.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut2.load(Ordering::Acquire) {
                    continue; // dropped: the client sees its connection closed
                }
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                // Without it, a message the relay forwards in two writes waits for the first
                // one's delayed acknowledgement (Nagle's algorithm): some 40 ms that the
                // client and server, which set it themselves, would never see.
                if client.set_nodelay(true).is_err() || server.set_nodelay(true).is_err() {
                    continue;
                }
                let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                {
                    let mut conns = conns2.lock().unwrap();
                    conns.push(client2);
                    conns.push(server2);
                }
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (Ok(server), Ok(client)),
                ] {
                    if let (Ok(from), Ok(to)) = (from, to) {
                        std::thread::spawn(move || pipe(from, to));
                    }
                }
            }
        });
        Ok(Relay { addr, cut, conns })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts (true) every open connection and refuses new ones, or lets them through again
    /// (false).
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Release);
        if cut {
            for c in self.conns.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Copies bytes one way until either side closes, then closes both.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}
