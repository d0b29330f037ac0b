"""SaslAuthenticate: one message of the SASL exchange the handshake chose.

A failed authentication is answered SASL_AUTHENTICATION_FAILED after connection.failed.authentication.delay.ms
(a password guesser gets few tries a second) and the connection is closed; its one log line names the
client's address, the mechanism and the user, never a password."""

import logging

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import ANYONE
from broker.security.sasl import AuthenticationFailed
from storage import clock

API = Api("SaslAuthenticate", (0, 2), acl=ANYONE, before_authentication=True, reauthenticates=True)

log = logging.getLogger("moldau.security")


def _answer(code, message=None, auth_bytes=b"", session_lifetime_ms=0) -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": auth_bytes,
            "session_lifetime_ms": session_lifetime_ms}


def handle(broker, request, header):
    session = header.session
    authenticator = session.sasl if session is not None else None
    if authenticator is None or authenticator.mechanism is None:
        if authenticator is not None:
            session.close_reason = "SaslAuthenticate before SaslHandshake"
        return _answer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request")
    session.reauth_supported |= header.api_version > 0
    try:
        answer, done = authenticator.authenticate(bytes(request["auth_bytes"]))
    except AuthenticationFailed as exc:
        # the connection's close logs this, once, with the client's address
        session.close_reason = f"failed authentication (mechanism {authenticator.mechanism}, " \
                               f"user {authenticator.user!r}): {exc}"
        return _delayed(broker.config["connection.failed.authentication.delay.ms"],
                        _answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)))
    if not done:
        return _answer(ErrorCode.NONE, None, answer)
    if authenticator.previous is not None:
        log.info("%s re-authenticated from %s", session.principal, session.peer)
    authenticator.previous = None
    session.principal = f"User:{authenticator.user}"
    session.authenticated = True
    session.sasl, session.completed_sasl = None, authenticator
    lifetime = authenticator.session_lifetime_ms  # the client re-authenticates before it ends
    session.expires_at = clock.monotonic() + lifetime / 1000 if lifetime else None
    return _answer(ErrorCode.NONE, None, answer, lifetime)


async def _delayed(delay_ms: int, answer: dict) -> dict:
    await clock.sleep(delay_ms / 1000)
    return answer
