// PX-10 (tests/it/ui_e2e.rs `hostile_page_cannot_read_or_change_anything`): Chromium loads an
// attacker page from a second local HTTP server on other origins (evil.example, localhost and
// 127.0.0.1 on another port) and from a DNS-rebinding name on the engine's own port, and the
// page (attack.js) throws fetch, forms, images, scripts and frames at the control API, the UI
// and the gateway via 127.0.0.1, localhost, 0.0.0.0 and [::1]. This script checks that no
// response was readable (beyond the engine's refusals on the rebinding origin, which must be
// there: they prove the requests reached the engine); Rust checks that nothing changed.
// The browser is signed in to the dashboard first (a one-time link, KH_LINK), so every attack
// runs with the session cookie in the jar: the cookie must not help a page of another origin,
// not even one on 127.0.0.1 or localhost (same-site, so SameSite=Strict still sends it).
// Env: KH_URL, KH_LINK, KH_TOKEN (only to prove it never leaked), KH_CALL_ID, KH_ARTIFACTS,
// KH_CHROMIUM.
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { check, launch, need, run } from "./lib.mjs";

const URL_ = need("KH_URL");
const TOKEN = need("KH_TOKEN");
const LINK = need("KH_LINK");
const CALL = need("KH_CALL_ID");
const ART = need("KH_ARTIFACTS");
const ENGINE_PORT = new URL(URL_).port;
const HTML = readFileSync(new URL("./attack.html", import.meta.url));
const JS = readFileSync(new URL("./attack.js", import.meta.url));
/** Text that would show the page read something real. */
const MARKERS = [TOKEN, "keyhaven-token", "gatewayUrl", "baseUrl", "modelCount", "oa-model", "proxyRunning", "chat.completion", "<div id=\"app\">"];

const served = [];
const evil = createServer((req, res) => {
  served.push(`${req.method} ${req.headers.host}${req.url}`);
  const path = req.url.split("?")[0];
  if (path === "/attack.html") return res.writeHead(200, { "content-type": "text/html" }).end(HTML);
  if (path === "/attack.js") return res.writeHead(200, { "content-type": "text/javascript" }).end(JS);
  res.writeHead(404).end();
});
await new Promise((r) => evil.listen(0, "127.0.0.1", r));
const EVIL_PORT = evil.address().port;

await run(async (keep) => {
  // Chromium's own Local/Private Network Access checks would block some of these requests
  // before they reach the engine; turn them off so the engine's guard is what is tested (other
  // browsers, and older Chromes, do not have them; docs/security-reliability.md §2.1: do not rely on PNA).
  const browser = await launch([
    "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP rebind.evil.example 127.0.0.1",
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults",
  ]);
  keep(browser);
  const { context } = browser;
  // The DNS-rebinding attacker: its page was first served from "its" address (this route), then
  // the name resolves to 127.0.0.1, so its same-origin requests reach the engine on its port.
  const rebind = `http://rebind.evil.example:${ENGINE_PORT}`;
  await context.route(`${rebind}/attack.html*`, (route) => route.fulfill({ status: 200, contentType: "text/html", body: HTML.toString() }));
  await context.route(`${rebind}/attack.js`, (route) => route.fulfill({ status: 200, contentType: "text/javascript", body: JS.toString() }));

  // The user's own dashboard session, in the same browser.
  const own = await context.newPage();
  await own.goto(LINK);
  await own.locator("h1", { hasText: "Overview" }).waitFor();
  check((await context.cookies(URL_)).length === 1, "the browser holds a dashboard session");
  const query = `engine=${ENGINE_PORT}&call=${encodeURIComponent(CALL)}`;
  const pages = [
    ["evil.example", `http://evil.example:${EVIL_PORT}/attack.html?${query}`],
    ["localhost-other-port", `http://localhost:${EVIL_PORT}/attack.html?${query}`],
    ["127.0.0.1-other-port", `http://127.0.0.1:${EVIL_PORT}/attack.html?${query}`],
    ["rebinding", `${rebind}/attack.html?${query}&rebind=1`],
  ];
  const all = [];
  for (const [name, url] of pages) {
    const page = await context.newPage();
    await page.goto(url);
    await page.getByText("Nothing to see here").waitFor();
    check(new URL(page.url()).host === new URL(url).host, `${name}: loaded from ${page.url()}`);
    await page.waitForFunction(() => window.__done === true, null, { timeout: 240_000 });
    const results = await page.evaluate(() => window.__results);
    await page.screenshot({ path: join(ART, `attack-${name}.png`) });
    await page.close();
    for (const r of results) all.push({ page: name, ...r });
    console.log(`- ${name}: ${results.length} attempts; outcomes ${JSON.stringify(count(results.map((r) => r.outcome)))}`);
  }
  writeFileSync(join(ART, "hostile-results.json"), JSON.stringify(all, null, 2));

  const leaks = all.filter((r) => MARKERS.some((m) => r.body.includes(m)));
  check(leaks.length === 0, `responses with engine data were readable: ${JSON.stringify(leaks.slice(0, 5))}`);
  const readable = all.filter((r) => r.outcome === "readable" && r.body.trim() !== "");
  const bad = readable.filter((r) => !(r.page === "rebinding" && r.base === rebind && [401, 403, 415, 0].includes(r.status) && /not allowed|control token|application\/json|Host/.test(r.body)));
  check(bad.length === 0, `readable responses: ${JSON.stringify(bad.slice(0, 5))}`);
  const ran = all.filter((r) => r.outcome === "loaded" && r.name.startsWith("script"));
  check(ran.length === 0, `a script from the engine ran: ${JSON.stringify(ran)}`);
  check(all.filter((r) => r.outcome === "loaded" && r.name.startsWith("img")).length === 0, "no image loaded from the engine");
  // Positive controls: the attacks really reached the engine.
  const refused = readable.filter((r) => r.page === "rebinding" && r.status === 403 && r.body.includes("Host not allowed"));
  check(refused.length >= 10, `the rebinding page's requests reached the engine and were refused by Host (${refused.length})`);
  const sent = all.filter((r) => r.page !== "rebinding" && r.outcome === "opaque");
  check(sent.length >= 10, `cross-origin no-cors requests were sent (${sent.length})`);
  check(all.length >= 4 * 4 * 20, `every attack ran (${all.length})`);
  check(served.some((s) => s.startsWith("GET evil.example:")), "the second server served the evil.example page");
  console.log(`attempts ${all.length}, readable refusals ${refused.length}, opaque ${sent.length}`);
}, "HOSTILE OK");

function count(xs) {
  const m = {};
  for (const x of xs) m[x] = (m[x] ?? 0) + 1;
  return m;
}
