"""What a TLS failure means, in the user's words: whose certificate, and what to change.

OpenSSL's own text ("certificate verify failed: unable to get local issuer certificate", "tlsv13
alert certificate required") is kept after the explanation. A client certificate the server
requires or refuses shows, under TLS 1.3, only at the first read after the handshake: it is
named there too, not taken for the server closing the connection.
"""

from __future__ import annotations

import ssl

# OpenSSL's X509_V_ERR codes of the server's certificate
_VERIFY = {
    9: "the server's certificate is not valid yet (this host's clock?)",
    10: "the server's certificate has expired",
    18: "the server's certificate is self-signed: give its CA as ca_bundle, or verify_tls: false",
    19: "the server's certificate is signed by a CA this client does not trust: give it as "
    "ca_bundle (or SSL_CERT_FILE)",
    20: "the server's certificate is signed by a CA this client does not trust: give it as "
    "ca_bundle (or SSL_CERT_FILE)",
    21: "the server's certificate is signed by a CA this client does not trust: give it as "
    "ca_bundle (or SSL_CERT_FILE)",
    62: "the server's certificate is not for this host name",
    64: "the server's certificate is not for this IP address",
}
# alerts the server sends about the client's certificate, and a server that speaks no TLS
_REASONS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate: give "
    "client_cert and client_key",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server refused the handshake (a client certificate "
    "it requires? give client_cert and client_key)",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust the client certificate's CA",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server refused the client certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the server says the client certificate has expired",
    "TLSV1_ALERT_ACCESS_DENIED": "the server denied this client certificate access",
    "WRONG_VERSION_NUMBER": "the server does not speak TLS there (an http:// URL?)",
    "RECORD_LAYER_FAILURE": "the server does not speak TLS there (an http:// URL?)",
}


def tls_failure(exc: BaseException) -> str | None:
    """What a TLS error means, with OpenSSL's words after it; None where ``exc`` is no TLS
    error."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        meaning = _VERIFY.get(exc.verify_code or -1)
        said = exc.verify_message or str(exc)
        return f"{meaning} ({said})" if meaning else f"certificate verify failed ({said})"
    if isinstance(exc, ssl.SSLError):
        meaning = _REASONS.get(str(exc.reason or ""))
        said = str(exc.reason or exc).lower().replace("_", " ")
        return f"{meaning} ({said})" if meaning else f"TLS: {said}"
    return None
