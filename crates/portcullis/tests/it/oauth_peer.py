"""A protected MCP server and its OAuth authorization server, both built from
the Python MCP SDK (`mcp` 2.3.0): the SDK's authorization-server routes
(metadata, dynamic client registration, authorize, token, revoke) over a small
in-memory provider that approves every authorization at once, and the SDK's
bearer-token guard in front of /mcp, which checks each token's resource.

usage: python oauth_peer.py PORT EXPIRES_IN [jwt]

With `jwt` the access tokens are JWTs (ES256, `iss` this issuer, `aud` the
resource the client asked for, `sub`, `scope`, `exp`) and the signing key is
published at /jwks: an identity provider for a resource server that checks
tokens itself, as the gateway does behind one.

Prints one JSON line per event on stdout, flushed: {"ready": true} once it
listens, {"issued": TOKEN} for every code and token it hands out (so the
test can look for them where they must not be), {"grant": TYPE} for every
token request it answers. GET /test/revoke drops every grant.
"""

import json
import secrets
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse

PORT = int(sys.argv[1])
EXPIRES_IN = int(sys.argv[2])
ISSUER = f"http://127.0.0.1:{PORT}"
RESOURCE = f"{ISSUER}/mcp"
SCOPE = "notes"
AS_JWT = len(sys.argv) > 3 and sys.argv[3] == "jwt"
SIGNING_KEY = ec.generate_private_key(ec.SECP256R1())
KEY_ID = "peer-key-1"


def say(**event):
    print(json.dumps(event), flush=True)


def mint(kind):
    # Distinctive, so a search for it cannot match anything else.
    value = f"zqpy{kind}{secrets.token_hex(12)}"
    say(issued=value)
    return value


class Provider:
    """Clients, codes and tokens in memory; every authorization approved."""

    def __init__(self):
        self.clients = {}
        self.codes = {}
        self.access = {}
        self.refresh = {}

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, client_info):
        # The SDK made up this client's secret: another value that must
        # not show up anywhere.
        if client_info.client_secret:
            say(issued=client_info.client_secret)
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params):
        code = mint("code")
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="alice",
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code):
        code = self.codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client, authorization_code):
        del self.codes[authorization_code.code]
        say(grant="authorization_code")
        return self.issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client, refresh_token):
        token = self.refresh.get(refresh_token)
        return token if token and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        del self.refresh[refresh_token.token]
        say(grant="refresh_token")
        return self.issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token):
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token):
        self.access.pop(getattr(token, "token", ""), None)
        self.refresh.pop(getattr(token, "token", ""), None)

    def issue(self, client_id, scopes, resource):
        access, refresh = self.access_token(scopes, resource), mint("refresh")
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + EXPIRES_IN,
            resource=resource,
            subject="alice",
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject="alice"
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=EXPIRES_IN,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )


    def access_token(self, scopes, resource):
        if not AS_JWT:
            return mint("access")
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": resource,
            "sub": "alice",
            "scope": " ".join(scopes),
            "iat": now,
            "exp": now + EXPIRES_IN,
            "jti": secrets.token_hex(8),
        }
        token = jwt.encode(claims, SIGNING_KEY, algorithm="ES256", headers={"kid": KEY_ID})
        say(issued=token)
        return token


provider = Provider()
server = MCPServer(
    name="python-notes",
    auth_server_provider=provider,
    auth=AuthSettings(
        issuer_url=ISSUER,
        resource_server_url=RESOURCE,
        validate_token_resource=True,
        required_scopes=[SCOPE],
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
        ),
        revocation_options=RevocationOptions(enabled=True),
    ),
    log_level="WARNING",
)


@server.tool()
def note(text: str) -> str:
    """Keeps a note and says what it kept."""
    return f"noted: {text}"


@server.custom_route("/test/revoke", methods=["GET"])
async def revoke(_: Request):
    provider.access.clear()
    provider.refresh.clear()
    return JSONResponse({"revoked": True})


@server.custom_route("/jwks", methods=["GET"])
async def jwks(_: Request):
    key = jwt.algorithms.ECAlgorithm.to_jwk(SIGNING_KEY.public_key(), as_dict=True)
    key.update(kid=KEY_ID, alg="ES256", use="sig")
    return JSONResponse({"keys": [key]})


async def main():
    import anyio

    async with anyio.create_task_group() as group:
        group.start_soon(lambda: server.run_streamable_http_async(host="127.0.0.1", port=PORT))
        # uvicorn has bound by the time /test/revoke answers; the test polls
        # for the port itself, this line only says the script got this far.
        say(ready=True)


if __name__ == "__main__":
    import anyio

    anyio.run(main)
