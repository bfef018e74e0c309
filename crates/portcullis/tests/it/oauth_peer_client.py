"""The Python MCP SDK's client logging in to a gateway that is a protected
resource (its OAuth client: protected-resource metadata from the 401's
challenge, the authorization server's metadata, dynamic registration, PKCE,
the code exchange with the `resource` parameter), then listing and calling.
The person's browser is played here: the authorization URL is fetched without
following its redirect, and the code read from where it points.

usage: python oauth_peer_client.py GATEWAY_MCP_URL TOOL TEXT
Prints one JSON object: the tools listed and the call's texts.
"""

import asyncio
import json
import sys
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

URL, TOOL, TEXT = sys.argv[1], sys.argv[2], sys.argv[3]
REDIRECT = "http://127.0.0.1:1/callback"  # never listened on: the code is read from the redirect


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


redirected = {}


async def browser(url):
    async with httpx2.AsyncClient() as http:
        answer = await http.get(url, follow_redirects=False)
    query = parse_qs(urlparse(answer.headers["location"]).query)
    redirected["code"] = query["code"][0]
    redirected["state"] = query.get("state", [None])[0]


async def callback():
    return AuthorizationCodeResult(code=redirected["code"], state=redirected["state"])


async def main():
    auth = OAuthClientProvider(
        server_url=URL,
        client_metadata=OAuthClientMetadata(
            client_name="python-peer", redirect_uris=[REDIRECT], scope="notes"
        ),
        storage=Memory(),
        redirect_handler=browser,
        callback_handler=callback,
    )
    async with httpx2.AsyncClient(auth=auth) as http:
        async with Client(streamable_http_client(URL, http_client=http), mode="legacy") as client:
            listed = await client.list_tools()
            result = await client.call_tool(TOOL, {"text": TEXT})
            texts = [block.text for block in result.content if block.type == "text"]
            print(json.dumps({
                "tools": sorted(tool.name for tool in listed.tools),
                "texts": texts,
                "is_error": bool(result.is_error),
            }))


asyncio.run(main())
