"""loadtest's HTTP client, for every call to a server: HTTP/1.1 over TCP, TLS or a Unix socket,
through a proxy where one is set, its reads stamped as they arrive (``http1``); kept-alive
connections to one origin (``pool``) under one configuration (``settings``); small calls
beside the requests (``calls``). It knows nothing of OpenAI's API or of scenarios."""
