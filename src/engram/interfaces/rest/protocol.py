"""uvicorn's HTTP/1.1 protocol, answering a request it cannot parse in the API's own error shape.

A malformed request line or header never reaches the app: uvicorn answers it with a plain-text 400
itself. Every server that runs the app (``engram serve``, its worker processes, the tests' and eval's
background server) uses this protocol instead, so that answer is ``{"error", "message"}`` JSON too.
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# How uvicorn's configuration names this class (``http=``): worker processes import it by name.
JSON_ERRORS_H11 = "engram.interfaces.rest.protocol:JsonErrorsH11Protocol"
_BODY = json.dumps(
    {"error": "bad_request", "message": "the request is not valid HTTP/1.1 (request line or headers)"}
).encode()


class JsonErrorsH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_BODY)).encode()),
            (b"connection", b"close"),
        ]
        self.transport.write(
            self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request"))
        )
        self.transport.write(self.conn.send(h11.Data(data=_BODY)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()
