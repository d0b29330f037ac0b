"""SaslHandshake: the client names its SASL mechanism; SaslAuthenticate requests carry the exchange. On an
authenticated connection of a client that sent SaslAuthenticate v1+, it begins a re-authentication.

Only v1: v0 was followed by raw, unframed SASL tokens, which no client of this broker needs."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import ANYONE

API = Api("SaslHandshake", (1, 1), acl=ANYONE, before_authentication=True, reauthenticates=True)


def handle(broker, request, header) -> dict:
    session = header.session
    if session is not None and session.sasl is None and session.completed_sasl is not None \
            and session.reauth_supported:
        session.sasl = session.completed_sasl.renewal()  # a re-authentication begins (KIP-368)
    authenticator = session.sasl if session is not None else None
    if authenticator is None:
        if session is not None and session.completed_sasl is not None:
            session.close_reason = "a second SaslHandshake from a client that cannot re-authenticate"
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    offered = list(authenticator.settings.mechanisms)
    if authenticator.mechanism is not None:
        session.close_reason = "a second SaslHandshake"
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": offered}
    if not authenticator.handshake(request["mechanism"]):
        session.close_reason = f"SASL mechanism {request['mechanism']!r} is not enabled"
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
    return {"error_code": ErrorCode.NONE, "mechanisms": offered}
