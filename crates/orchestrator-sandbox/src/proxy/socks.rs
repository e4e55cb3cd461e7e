//! The proxy's SOCKS5 door (RFC 1928): no authentication, the CONNECT command, and domain, IPv4
//! and IPv6 addresses. A domain is resolved by the proxy (what `socks5h://` asks for); an address
//! the client resolved itself is checked as it stands. BIND and UDP ASSOCIATE are refused: a
//! jailed program may open connections, never receive them or send datagrams out.

use std::net::{Ipv4Addr, Ipv6Addr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::{Protocol, Refusal, Report, Rules, open, relay};

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CMD_CONNECT: u8 = 0x01;
const ATYP_V4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_V6: u8 = 0x04;

/// Reply codes.
const SUCCEEDED: u8 = 0x00;
const NOT_ALLOWED: u8 = 0x02;
const HOST_UNREACHABLE: u8 = 0x04;
const COMMAND_NOT_SUPPORTED: u8 = 0x07;
const ADDRESS_NOT_SUPPORTED: u8 = 0x08;

pub(super) async fn serve(mut client: UnixStream, rules: &Rules) {
    // A client that speaks something else or leaves half-way gets nothing more.
    let _ = handle(&mut client, rules).await;
}

async fn handle(client: &mut UnixStream, rules: &Rules) -> std::io::Result<()> {
    let mut greeting = [0u8; 2];
    client.read_exact(&mut greeting).await?;
    if greeting[0] != VERSION {
        return Ok(());
    }
    let mut methods = vec![0u8; usize::from(greeting[1])];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTH) {
        client.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Ok(());
    }
    client.write_all(&[VERSION, NO_AUTH]).await?;

    let mut request = [0u8; 4];
    client.read_exact(&mut request).await?;
    let [version, command, _reserved, atyp] = request;
    if version != VERSION {
        return Ok(());
    }
    let host = match atyp {
        ATYP_V4 => {
            let mut octets = [0u8; 4];
            client.read_exact(&mut octets).await?;
            Ipv4Addr::from(octets).to_string()
        }
        ATYP_V6 => {
            let mut octets = [0u8; 16];
            client.read_exact(&mut octets).await?;
            Ipv6Addr::from(octets).to_string()
        }
        ATYP_DOMAIN => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await?;
            match String::from_utf8(name) {
                Ok(name) if valid_name(&name) => name,
                _ => return reply(client, HOST_UNREACHABLE).await,
            }
        }
        _ => return reply(client, ADDRESS_NOT_SUPPORTED).await,
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await?;
    let port = u16::from_be_bytes(port);
    if command != CMD_CONNECT {
        return reply(client, COMMAND_NOT_SUPPORTED).await;
    }
    let mut report = Report::new(rules, Protocol::Socks5, &host, port);
    match open(&mut report, &host, port).await {
        Ok(upstream) => {
            reply(client, SUCCEEDED).await?;
            relay(&mut report, client, upstream).await;
        }
        Err(Refusal::Denied(_)) => reply(client, NOT_ALLOWED).await?,
        Err(Refusal::Unreachable(_)) => reply(client, HOST_UNREACHABLE).await?,
    }
    Ok(())
}

/// A host name a resolver would accept: letters, digits, dots, hyphens and underscores.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// A reply with the bound address left unspecified (0.0.0.0:0): the client cannot reach the
/// proxy's side of the connection anyway.
async fn reply(client: &mut UnixStream, code: u8) -> std::io::Result<()> {
    client
        .write_all(&[VERSION, code, 0, ATYP_V4, 0, 0, 0, 0, 0, 0])
        .await
}
