//! SCRAM-SHA-256 (RFC 5802, RFC 7677), the client's side, its costly step
//! done once per isolate. The salted password (PBKDF2: 4,096 rounds of
//! HMAC-SHA-256 by default) depends only on the password, the salt and the
//! rounds, the same for every connection to one database: computed for each
//! connection, it was half of an event's CPU in wasm (BENCHMARKS.md). It is
//! kept in the isolate's memory alone, as the password it comes from is.

use std::cell::RefCell;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The rounds a server may ask for: no fewer than RFC 7677 asks a client
/// to accept, and no more than a connection can compute before its
/// deadline (about 0.1 s in wasm).
const ROUNDS: std::ops::RangeInclusive<u32> = 4_096..=100_000;

/// The GS2 header: no channel binding (the socket is the runtime's own,
/// whose TLS ends at Hyperdrive).
const GS2: &str = "n,,";

/// A salted password, and what it was made from.
struct Salted {
    password: Vec<u8>,
    salt: Vec<u8>,
    rounds: u32,
    salted: [u8; 32],
}

thread_local! {
    /// The last one computed.
    static SALTED: RefCell<Option<Salted>> = const { RefCell::new(None) };
}

/// One exchange: the client's first message, its final message from the
/// server's first, and the server's proof checked.
pub(crate) struct Scram {
    password: Vec<u8>,
    nonce: String,
    /// Once the client's final message is made: the salted password and
    /// the message both sides sign.
    signed: Option<([u8; 32], String)>,
}

impl Scram {
    /// An exchange for `password`, with a fresh nonce.
    pub(crate) fn new(password: &[u8]) -> Result<Scram, String> {
        let mut random = [0u8; 18];
        getrandom::getrandom(&mut random).map_err(|e| format!("no random nonce: {e}"))?;
        Ok(Scram::with_nonce(password, STANDARD.encode(random)))
    }

    fn with_nonce(password: &[u8], nonce: String) -> Scram {
        // SASLprep, as Postgres applies it; a password it refuses is used
        // as it is, as Postgres does.
        let prepared = std::str::from_utf8(password)
            .ok()
            .and_then(|text| stringprep::saslprep(text).ok());
        let password = prepared.map_or_else(|| password.to_vec(), |p| p.as_bytes().to_vec());
        Scram {
            password,
            nonce,
            signed: None,
        }
    }

    /// The client's first message. The user is the startup message's:
    /// Postgres ignores the one named here.
    pub(crate) fn client_first(&self) -> String {
        format!("{GS2}{}", self.client_first_bare())
    }

    fn client_first_bare(&self) -> String {
        format!("n=,r={}", self.nonce)
    }

    /// The client's final message, with its proof, from the server's first.
    pub(crate) fn client_final(&mut self, server_first: &str) -> Result<String, String> {
        let (mut nonce, mut salt, mut rounds) = (None, None, None);
        for attribute in server_first.split(',') {
            match attribute.split_at_checked(2) {
                Some(("r=", value)) => nonce = Some(value),
                Some(("s=", value)) => salt = Some(value),
                Some(("i=", value)) => rounds = Some(value),
                Some(("m=", _)) => return Err("the server asks for an extension".into()),
                _ => {}
            }
        }
        let unreadable = |what: &str| format!("the server's first message has no {what}");
        let nonce = nonce.ok_or_else(|| unreadable("nonce"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend the client's".into());
        }
        let salt = STANDARD
            .decode(salt.ok_or_else(|| unreadable("salt"))?)
            .map_err(|_| unreadable("readable salt"))?;
        let rounds: u32 = rounds
            .and_then(|r| r.parse().ok())
            .filter(|r| ROUNDS.contains(r))
            .ok_or_else(|| unreadable("usable round count"))?;

        let salted = salted(&self.password, &salt, rounds);
        let without_proof = format!("c={},r={nonce}", STANDARD.encode(GS2));
        let signed = format!(
            "{},{server_first},{without_proof}",
            self.client_first_bare()
        );
        let proof = proof(&salted, &signed);
        self.signed = Some((salted, signed));
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)))
    }

    /// Whether the server's final message proves it knows the password.
    pub(crate) fn verify(&self, server_final: &str) -> Result<(), String> {
        let Some((salted, signed)) = &self.signed else {
            return Err("the server's final message came first".into());
        };
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(format!("the server refused the proof: {error}"));
        }
        let proof = server_final
            .strip_prefix("v=")
            .and_then(|v| STANDARD.decode(v.split(',').next()?).ok())
            .ok_or("the server's final message has no proof")?;
        let server_key = hmac(salted, b"Server Key");
        let mut mac = Hmac::<Sha256>::new_from_slice(&server_key).expect("HMAC takes any key");
        mac.update(signed.as_bytes());
        mac.verify_slice(&proof)
            .map_err(|_| "the server's proof is wrong".to_string())
    }
}

/// The client's proof: its key, XOR its signature of the `signed` message.
fn proof(salted: &[u8; 32], signed: &str) -> Vec<u8> {
    let client_key = hmac(salted, b"Client Key");
    let stored_key: [u8; 32] = Sha256::digest(client_key).into();
    let signature = hmac(&stored_key, signed.as_bytes());
    client_key
        .iter()
        .zip(signature)
        .map(|(k, s)| k ^ s)
        .collect()
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// `Hi(password, salt, rounds)` (PBKDF2-HMAC-SHA-256, one block), from the
/// isolate's cache when it was made from the same three.
fn salted(password: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let cached = SALTED.with_borrow(|cached| {
        let kept = cached.as_ref()?;
        let same = kept.password == password && kept.salt == salt && kept.rounds == rounds;
        same.then_some(kept.salted)
    });
    if let Some(salted) = cached {
        return salted;
    }
    let keyed = Hmac::<Sha256>::new_from_slice(password).expect("HMAC takes any key");
    let mut mac = keyed.clone();
    mac.update(salt);
    mac.update(&1u32.to_be_bytes());
    let mut round: [u8; 32] = mac.finalize().into_bytes().into();
    let mut salted = round;
    for _ in 1..rounds {
        let mut mac = keyed.clone();
        mac.update(&round);
        round = mac.finalize().into_bytes().into();
        salted.iter_mut().zip(round).for_each(|(s, r)| *s ^= r);
    }
    SALTED.set(Some(Salted {
        password: password.to_vec(),
        salt: salt.to_vec(),
        rounds,
        salted,
    }));
    salted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677, section 3: user "user", password "pencil".
    const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const PROOF: &str = "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    /// The RFC's exchange names the user ("n=user"); Postgres's leaves it
    /// empty, so the signed message, and the proofs, differ by it.
    fn rfc_exchange() -> (Scram, String) {
        let mut scram = Scram::with_nonce(b"pencil", CLIENT_NONCE.into());
        let signed = format!(
            "n=user,r={CLIENT_NONCE},{SERVER_FIRST},c=biws,r={}",
            &SERVER_FIRST[2..SERVER_FIRST.find(',').unwrap()]
        );
        scram.client_final(SERVER_FIRST).unwrap();
        let salted = scram.signed.as_ref().unwrap().0;
        scram.signed = Some((salted, signed));
        (scram, salted.iter().map(|b| format!("{b:02x}")).collect())
    }

    #[test]
    fn the_rfc_7677_exchange_is_proven_both_ways() {
        let (scram, _) = rfc_exchange();
        let (salted, signed) = scram.signed.as_ref().unwrap();
        let proof = proof(salted, signed);
        assert_eq!(format!("p={}", STANDARD.encode(proof)), PROOF);
        scram.verify(SERVER_FINAL).unwrap();
        let wrong = SERVER_FINAL.replace("6rr", "7rr");
        assert!(scram.verify(&wrong).is_err());
        assert!(scram.verify("e=invalid-proof").is_err());
    }

    #[test]
    fn the_salted_password_is_computed_once_per_password_and_salt() {
        SALTED.set(None);
        let (_, first) = rfc_exchange();
        let kept = SALTED.with_borrow(|c| c.as_ref().map(|k| (k.rounds, k.salted)));
        assert_eq!(kept.map(|(rounds, _)| rounds), Some(4096));
        // A second exchange reads it back: the same proof, from the cache.
        let (_, again) = rfc_exchange();
        assert_eq!(again, first);
        // Another password is not answered from it.
        let mut other = Scram::with_nonce(b"pencil2", CLIENT_NONCE.into());
        other.client_final(SERVER_FIRST).unwrap();
        assert_ne!(other.signed.unwrap().0, kept.unwrap().1);
    }

    #[test]
    fn a_server_message_that_does_not_follow_the_exchange_is_refused() {
        let mut scram = Scram::with_nonce(b"pencil", CLIENT_NONCE.into());
        assert!(scram.verify(SERVER_FINAL).is_err(), "a final message first");
        for bad in [
            "r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=!!,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100001",
            "m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ] {
            assert!(scram.client_final(bad).is_err(), "{bad}");
        }
        assert_eq!(scram.client_first(), format!("n,,n=,r={CLIENT_NONCE}"));
    }
}
