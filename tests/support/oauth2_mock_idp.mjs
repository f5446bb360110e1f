// Runs oauth2-mock-server (the library its CLI wraps, same keys and endpoints) with one hook the
// stock CLI lacks: a client_credentials token names its client in `sub` and `client_id` (form body
// or HTTP Basic), carries the groups asked for in the form field `groups` (space separated, sent
// as a list claim) or `groups_string` (sent verbatim as a string claim) and lives `expires_in`
// seconds if the form asks for it.
//
// Usage: node oauth2_mock_idp.mjs <.../oauth2-mock-server/dist/index.mjs> <host> <port> [jwk.json ...]
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [modulePath, host, port, ...jwkFiles] = process.argv.slice(2);
const { OAuth2Server, Events } = await import(pathToFileURL(modulePath).href);

const server = new OAuth2Server();
for (const file of jwkFiles) {
  await server.issuer.keys.add(JSON.parse(readFileSync(file, "utf8")));
}
if (jwkFiles.length === 0) {
  await server.issuer.keys.generate("RS256");
}

server.service.on(Events.BeforeTokenSigning, (token, req) => {
  const body = req.body ?? {};
  if (body.grant_type !== "client_credentials") {
    return;
  }
  let clientId = body.client_id;
  const authorization = req.headers.authorization ?? "";
  if (!clientId && authorization.startsWith("Basic ")) {
    clientId = Buffer.from(authorization.slice(6), "base64").toString("utf8").split(":")[0];
  }
  if (clientId) {
    token.payload.sub = clientId;
    token.payload.client_id = clientId;
  }
  if (typeof body.groups === "string") {
    token.payload.groups = body.groups.split(" ").filter(Boolean);
  }
  if (typeof body.groups_string === "string") {
    token.payload.groups = body.groups_string;
  }
  if (typeof body.expires_in === "string") {
    token.payload.exp = token.payload.iat + Number(body.expires_in);
  }
});

await server.start(Number(port), host);
console.log(`OAuth 2 issuer is ${server.issuer.url}`);

const stop = async () => {
  await server.stop();
  process.exit(0);
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
