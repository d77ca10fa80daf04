import { useState } from "preact/hooks";
import { api, type CaChange, type TrustState } from "../ipc";
import { Empty, ErrorNotice, View, useAction, useLoad } from "../ui";

const GOOD: TrustState[] = ["installed", "alreadyInstalled", "present"];
const BAD: TrustState[] = ["failed", "stale"];

function stateClass(s: TrustState): string {
  return GOOD.includes(s) ? "status-ok" : BAD.includes(s) ? "status-error" : "";
}

export function CaTrust(_: { args: string[] }) {
  const res = useLoad(() => api().ca());
  const act = useAction();
  const [change, setChange] = useState<CaChange>();
  const run = (f: () => Promise<CaChange>) =>
    void act.run(f).then((c) => {
      if (c) {
        setChange(c);
        res.reload();
      }
    });
  return (
    <>
      <p>
        Keyhaven's local certificate authority lets its proxy read Cursor's model traffic. It is name-constrained to the
        intercepted domains only, and its private key stays on this machine.
      </p>
      <View res={res}>
        {(ca) => (
          <>
            {!ca.exists ? (
              <Empty title="No CA yet.">
                <p>Install creates it and adds it to the trust stores below.</p>
              </Empty>
            ) : (
              <dl>
                <dt>Fingerprint (SHA-256)</dt>
                <dd>
                  <code class="wrap">{ca.fingerprintSha256}</code>
                </dd>
                <dt>Valid until</dt>
                <dd>{ca.notAfter ?? "—"}</dd>
                <dt>Intercepted domains</dt>
                <dd>{ca.intercept.join(", ") || "—"}</dd>
                <dt>Private key in</dt>
                <dd>{ca.keyLocation ?? "—"}</dd>
              </dl>
            )}
            <h2>Trust stores</h2>
            {ca.stores.length === 0 ? (
              <p class="muted">No trust stores found on this system.</p>
            ) : (
              <table class="table">
                <thead>
                  <tr>
                    <th scope="col">Store</th>
                    <th scope="col">State</th>
                    <th scope="col">Detail</th>
                  </tr>
                </thead>
                <tbody>
                  {ca.stores.map((s) => (
                    <tr key={s.store}>
                      <td>{s.store}</td>
                      <td>
                        <span class={`tag ${stateClass(s.state)}`}>{s.state}</span>
                      </td>
                      <td>{s.detail}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
            <div class="panel">
              <h3>Install</h3>
              <p>
                Creates the CA if needed and adds it to each trust store above (the OS store may ask for your password).
                Afterwards <strong>restart Cursor</strong> so it picks up the new root.
              </p>
              <button type="button" class="primary" disabled={act.busy} onClick={() => run(() => api().caInstall())}>
                Install CA
              </button>
              <h3>Uninstall</h3>
              <p>
                Removes the CA from every trust store (the files stay so you can install again). Restart Cursor afterwards;
                with routing set to local or hybrid, Cursor's calls will then fail until you reinstall or stop the proxy.
              </p>
              <button type="button" class="danger" disabled={act.busy} onClick={() => confirm("Remove the Keyhaven CA from all trust stores?") && run(() => api().caUninstall())}>
                Uninstall CA
              </button>
            </div>
          </>
        )}
      </View>
      {act.busy && <p role="status">Working…</p>}
      {act.error && <ErrorNotice error={act.error} />}
      {change && (
        <div class={`notice ${change.ok ? "ok" : "error"}`} role="status">
          <strong>{change.ok ? "Done." : "Some stores failed."}</strong>
          <ul>
            {change.stores.map((s) => (
              <li key={s.store}>
                {s.store}: {s.detail}
              </li>
            ))}
          </ul>
          {change.notes.length > 0 && (
            <>
              <p>Next:</p>
              <ul>
                {change.notes.map((n) => (
                  <li key={n}>{n}</li>
                ))}
              </ul>
            </>
          )}
        </div>
      )}
    </>
  );
}
