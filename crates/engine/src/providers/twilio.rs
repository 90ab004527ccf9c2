//! Twilio: `X-Twilio-Signature` is the base64 HMAC-SHA1, under the account's
//! auth token, of the full URL Twilio called followed — for form posts — by
//! every POST parameter's name and value, sorted by name. A JSON body is
//! bound through the URL instead: Twilio adds `bodySHA256=<hex>` to the query,
//! and that digest must match the body. The dedupe key is
//! `I-Twilio-Idempotency-Token`.
//!
//! The URL must be the one Twilio was given: behind a proxy that rewrites the
//! host or scheme, configure Twilio with the URL the worker sees.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::{
    required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};
use crate::signature::base64_decode;

pub struct Twilio;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(Twilio))
}

const FORM: &str = "application/x-www-form-urlencoded";

fn is_form(req: &RawRequest) -> bool {
    req.header("content-type")
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case(FORM))
}

/// The most form parameters read from one request. Twilio sends a few
/// dozen; the cap bounds the work done on a body before its signature is
/// known to be good.
const MAX_FORM_PARAMS: usize = 1_000;

/// Decodes `application/x-www-form-urlencoded` pairs (`+` is a space), at
/// most [`MAX_FORM_PARAMS`] of them, as browsers and Twilio's own libraries
/// do (`form_urlencoded`): a malformed escape is kept as sent, and escaped
/// bytes that are not UTF-8 become U+FFFD. The signature covers the decoded
/// parameters, so it decides whether they are what Twilio sent.
fn form_pairs(body: &[u8]) -> Result<Vec<(String, String)>, Rejection> {
    std::str::from_utf8(body)
        .map_err(|_| Rejection::MalformedBody("form body is not UTF-8".into()))?;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(body)
        .take(MAX_FORM_PARAMS + 1)
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    if pairs.len() > MAX_FORM_PARAMS {
        return Err(Rejection::MalformedBody(format!(
            "more than {MAX_FORM_PARAMS} form parameters"
        )));
    }
    Ok(pairs)
}

/// What a form's signature covers after the URL: each parameter's name and
/// value, decoded, sorted by name, joined with no separator.
fn signed_params(body: &[u8]) -> Result<String, Rejection> {
    let mut pairs = form_pairs(body)?;
    pairs.sort();
    Ok(pairs
        .into_iter()
        .map(|(name, value)| name + &value)
        .collect())
}

/// `url` as given, and with its scheme's default port added if absent or
/// removed if present (`https://host/` and `https://host:443/`).
fn url_variants(url: &str) -> Vec<String> {
    let mut variants = vec![url.to_string()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return variants;
    };
    let port = match scheme {
        "https" => "443",
        "http" => "80",
        _ => return variants,
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let other = match authority.rsplit_once(':') {
        Some((host, p)) if p == port => host.to_string(),
        Some((_, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !authority.ends_with(']') => {
            return variants
        }
        _ => format!("{authority}:{port}"),
    };
    variants.push(format!("{scheme}://{other}{path}"));
    variants
}

/// The query parameter `name` of `url`, still percent-encoded.
fn query_param<'a>(url: &'a str, name: &str) -> Option<&'a str> {
    let query = url.split_once('?')?.1.split('#').next()?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

impl Provider for Twilio {
    fn name(&self) -> &'static str {
        "twilio"
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header =
            required_header(req, "x-twilio-signature").ok_or(Rejection::MissingSignature)?;
        let candidate = base64_decode(header).ok_or(Rejection::MalformedSignature)?;

        // What is signed: the URL, then the sorted form parameters — unless
        // the URL carries bodySHA256, which binds the body instead (checked
        // below, whatever the content type says).
        let body_sha256 = query_param(&req.url, "bodySHA256");
        let params = if body_sha256.is_none() && is_form(req) {
            signed_params(&req.body)?
        } else {
            String::new()
        };

        // Twilio's own validators accept the URL with and without its
        // scheme's default port: a proxy may add or drop it.
        let urls = url_variants(&req.url);
        let signed_by = ctx.secrets.iter().position(|token| {
            urls.iter().any(|url| {
                let mut mac =
                    Hmac::<Sha1>::new_from_slice(token).expect("HMAC accepts any key length");
                mac.update(url.as_bytes());
                mac.update(params.as_bytes());
                mac.verify_slice(&candidate).is_ok()
            })
        });
        let scheme = if body_sha256.is_some() {
            "X-Twilio-Signature: HMAC-SHA1 of the URL (its bodySHA256 binds the body)"
        } else if params.is_empty() {
            "X-Twilio-Signature: HMAC-SHA1 of the URL"
        } else {
            "X-Twilio-Signature: HMAC-SHA1 of the URL and the sorted form parameters"
        };
        let verified = verdict(scheme, signed_by, None, ctx)?;
        // The signature covers the URL; the URL must cover the body. A body
        // that is neither signed form parameters nor bound by a digest is
        // not authenticated at all.
        let bound = match body_sha256 {
            Some(expected) => {
                expected.eq_ignore_ascii_case(&hex::encode(Sha256::digest(&req.body)))
            }
            None => is_form(req) || req.body.is_empty(),
        };
        if !bound {
            return Err(Rejection::BadSignature);
        }
        Ok(verified)
    }

    /// A form's signature covers its parameters decoded and sorted, not its
    /// bytes: `B=2&A=1` verifies as well as `A=1&B=2`. So the fence is what
    /// is signed — the sorted pairs — and a reordered or re-encoded copy is
    /// still a replay. A body bound by `bodySHA256` is fenced by its bytes.
    fn replay_fence(&self, req: &RawRequest) -> Option<String> {
        if query_param(&req.url, "bodySHA256").is_none() && is_form(req) {
            // Exactly the signed string, after the URL without its default
            // port: any copy that verifies has the same fence.
            let url = url_variants(&req.url).into_iter().min_by_key(String::len)?;
            let signed = format!("{url}\n{}", signed_params(&req.body).ok()?);
            return Some(crate::event::sha256_hex(signed.as_bytes()));
        }
        Some(crate::event::sha256_hex(&req.body))
    }

    /// The type is the status or event the body reports, when it has one.
    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        let id =
            required_header(req, "i-twilio-idempotency-token").ok_or(Rejection::MissingEventId)?;
        let kind = if is_form(req) {
            let pairs = form_pairs(&req.body)?;
            ["EventType", "MessageStatus", "CallStatus", "SmsStatus"]
                .iter()
                .find_map(|field| pairs.iter().find(|(name, _)| name == field))
                .map_or_else(|| "twilio".to_string(), |(_, value)| value.clone())
        } else {
            "twilio".to_string()
        };
        Ok(Identity::Event(EventIdentity {
            id: id.to_string(),
            kind,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::Secrets;

    // Twilio's worked example ("Webhooks security"): auth token 12345.
    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const SIG: &str = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";
    // Deliberately out of order: the signature sorts the parameters.
    const FORM_BODY: &str = "To=%2B18005551212&CallSid=CA1234567890ABCDE&Digits=1234&From=%2B12349013030&Caller=%2B12349013030";

    fn request(url: &str, content_type: &str, sig: Option<&str>, body: &str) -> RawRequest {
        let headers = [
            ("Content-Type", Some(content_type)),
            ("I-Twilio-Idempotency-Token", Some("idem-1")),
            ("X-Twilio-Signature", sig),
        ];
        testing::request_to(url, &headers, body)
    }

    /// `tokens`: space-separated. Twilio's example token is shorter than
    /// the worker's minimum, so they are taken whole, not through `parse`.
    fn verify(req: &RawRequest, tokens: &str) -> Result<(), Rejection> {
        let tokens: Vec<&[u8]> = tokens.split(' ').map(str::as_bytes).collect();
        let secrets = Secrets::from_raw(&tokens);
        Twilio.verify(req, &testing::context(&secrets, 0)).map(drop)
    }

    #[test]
    fn twilios_published_example_verifies() {
        assert_eq!(
            verify(&request(URL, FORM, Some(SIG), FORM_BODY), "12345"),
            Ok(())
        );
        let charset = "application/x-www-form-urlencoded; charset=utf-8";
        let req = request(URL, charset, Some(SIG), FORM_BODY);
        assert_eq!(verify(&req, "old 12345"), Ok(()));
    }

    #[test]
    fn any_change_to_url_params_or_token_is_refused() {
        let tampered = FORM_BODY.replace("Digits=1234", "Digits=9999");
        assert_eq!(
            verify(&request(URL, FORM, Some(SIG), &tampered), "12345"),
            Err(Rejection::BadSignature)
        );
        let elsewhere = URL.replace("bar=2", "bar=3");
        assert_eq!(
            verify(&request(&elsewhere, FORM, Some(SIG), FORM_BODY), "12345"),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify(&request(URL, FORM, Some(SIG), FORM_BODY), "54321"),
            Err(Rejection::BadSignature)
        );
        assert_eq!(
            verify(&request(URL, FORM, None, FORM_BODY), "12345"),
            Err(Rejection::MissingSignature)
        );
        assert_eq!(
            verify(&request(URL, FORM, Some("***"), FORM_BODY), "12345"),
            Err(Rejection::MalformedSignature)
        );
    }

    /// A JSON body's URL, carrying the body's digest, and its signature.
    fn digest_url(body: &str) -> (String, String) {
        let digest = hex::encode(Sha256::digest(body.as_bytes()));
        let url = format!("https://example.com/webhooks/twilio?bodySHA256={digest}");
        let sig = url_signature(&url);
        (url, sig)
    }

    #[test]
    fn a_json_body_is_bound_by_its_digest_in_the_url() {
        let body = r#"{"status":"delivered"}"#;
        let (url, sig) = digest_url(body);
        let json = |body| request(&url, "application/json", Some(&sig), body);
        assert_eq!(verify(&json(body), "12345"), Ok(()));
        let other = json(r#"{"status":"failed"}"#);
        assert_eq!(verify(&other, "12345"), Err(Rejection::BadSignature));
    }

    /// The signature of `url` alone, as Twilio makes it for a JSON body.
    fn url_signature(url: &str) -> String {
        let mut mac = Hmac::<Sha1>::new_from_slice(b"12345").unwrap();
        mac.update(url.as_bytes());
        crate::signature::base64_encode(&mac.finalize().into_bytes())
    }

    #[test]
    fn a_digest_in_the_url_binds_the_body_whatever_the_content_type() {
        let body = r#"{"status":"delivered"}"#;
        let (url, sig) = digest_url(body);
        // The JSON request's URL and signature, re-sent as a form.
        let form = |body| verify(&request(&url, FORM, Some(&sig), body), "12345");
        assert_eq!(form(""), Err(Rejection::BadSignature));
        assert_eq!(form("Status=failed"), Err(Rejection::BadSignature));
        assert_eq!(form(body), Ok(()));
    }

    #[test]
    fn the_url_verifies_with_and_without_its_default_port() {
        assert_eq!(
            url_variants("https://a.example/x?y=1"),
            vec!["https://a.example/x?y=1", "https://a.example:443/x?y=1"]
        );
        assert_eq!(
            url_variants("http://a.example:80"),
            vec!["http://a.example:80", "http://a.example"]
        );
        assert_eq!(url_variants("https://a.example:8443/x").len(), 1);
        let with_port = URL.replace("mycompany.com", "mycompany.com:443");
        assert_eq!(
            verify(&request(&with_port, FORM, Some(SIG), FORM_BODY), "12345"),
            Ok(())
        );
        let sig = url_signature("https://example.com:443/t");
        let json = request("https://example.com/t", "application/json", Some(&sig), "");
        assert_eq!(verify(&json, "12345"), Ok(()));
        let other_port = URL.replace("mycompany.com", "mycompany.com:8443");
        assert_eq!(
            verify(&request(&other_port, FORM, Some(SIG), FORM_BODY), "12345"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn a_form_with_too_many_parameters_is_refused_before_any_hmac() {
        let many = vec!["a=1"; MAX_FORM_PARAMS + 1].join("&");
        assert!(matches!(
            verify(&request(URL, FORM, Some(SIG), &many), "12345"),
            Err(Rejection::MalformedBody(_))
        ));
        let enough = vec!["a=1"; MAX_FORM_PARAMS].join("&");
        assert_eq!(
            verify(&request(URL, FORM, Some(SIG), &enough), "12345"),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn a_reordered_or_reencoded_form_has_the_same_fence() {
        let fence = |body: &str| Twilio.replay_fence(&request(URL, FORM, Some(SIG), body));
        let sorted = fence("A=1&B=two+words");
        assert!(sorted.is_some());
        assert_eq!(fence("B=two%20words&A=1&"), sorted);
        assert_ne!(fence("A=1&B=two"), sorted);
        // Re-split pairs sign the same string: the same fence.
        assert_eq!(fence("A=1B&B=two words"), fence("A=1&BB=two words"));
        let with_port = request(
            &URL.replace(".com", ".com:443"),
            FORM,
            Some(SIG),
            "A=1&B=two+words",
        );
        assert_eq!(Twilio.replay_fence(&with_port), sorted);
        let json = request(
            "https://example.com/t?bodySHA256=00",
            "application/json",
            None,
            "{}",
        );
        let body_hash = crate::event::sha256_hex(b"{}");
        assert_eq!(Twilio.replay_fence(&json), Some(body_hash));
    }

    #[test]
    fn keyed_by_the_idempotency_token_and_typed_by_status() {
        let body = "MessageSid=SM1&MessageStatus=delivered";
        let event = Twilio
            .identify(&request(URL, FORM, None, body))
            .unwrap()
            .expect_event();
        assert_eq!(
            event,
            EventIdentity {
                id: "idem-1".into(),
                kind: "delivered".into()
            }
        );
        let no_token = RawRequest::new(URL, [], body.as_bytes().to_vec());
        assert_eq!(Twilio.identify(&no_token), Err(Rejection::MissingEventId));
    }

    #[test]
    fn form_decoding() {
        assert_eq!(
            form_pairs(b"a=1+2&b=%2B3&c").unwrap(),
            vec![
                ("a".into(), "1 2".into()),
                ("b".into(), "+3".into()),
                ("c".into(), "".into())
            ]
        );
        // Kept as sent, as every form decoder does; the HMAC still decides.
        assert_eq!(
            form_pairs(b"a=%zz&b=%2").unwrap(),
            vec![("a".into(), "%zz".into()), ("b".into(), "%2".into())]
        );
        assert!(form_pairs(b"a=\xff").is_err(), "not UTF-8");
    }
}
