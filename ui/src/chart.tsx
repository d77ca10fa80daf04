// A small SVG column chart (stacked or grouped) with a legend and the same numbers as a table,
// so screen readers and keyboard users get the data too. No chart library: the Overview needs
// only columns per day, and this keeps the bundle small.
import { niceMax, shortDay, type Stacked } from "./charts";

const W = 640;
const H = 180;
const PAD = { left: 56, right: 8, top: 8, bottom: 22 };

export function ColumnChart({ title, data, format, grouped = false }: { title: string; data: Stacked; format: (v: number) => string; grouped?: boolean }) {
  if (data.total === 0) return <p class="muted">Nothing in this window yet.</p>;
  const top = niceMax(data.max);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const slot = plotW / data.labels.length;
  const barW = Math.max(2, Math.min(36, slot * 0.7));
  const y = (v: number) => PAD.top + plotH - (v / top) * plotH;
  const every = Math.ceil(data.labels.length / 10);
  const summary = `${title}: ${data.labels.length} days, highest ${format(data.max)}.`;
  return (
    <figure class="chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={summary} preserveAspectRatio="none">
        {[0, 0.5, 1].map((f) => (
          <g key={f}>
            <line class="grid" x1={PAD.left} x2={W - PAD.right} y1={y(top * f)} y2={y(top * f)} />
            <text class="axis" x={PAD.left - 4} y={y(top * f) + 4} text-anchor="end">
              {format(top * f)}
            </text>
          </g>
        ))}
        {data.labels.map((day, i) => {
          const x0 = PAD.left + i * slot + (slot - barW) / 2;
          let acc = 0;
          const row = data.values[i] ?? [];
          return (
            <g key={day}>
              {row.map((v, k) => {
                if (v <= 0) return null;
                if (grouped) {
                  const w = barW / row.length;
                  return (
                    <rect key={k} class={`s${k % 6}`} x={x0 + k * w} y={y(v)} width={Math.max(1, w - 1)} height={y(0) - y(v)}>
                      <title>{`${day} · ${data.keys[k]}: ${format(v)}`}</title>
                    </rect>
                  );
                }
                const r = (
                  <rect key={k} class={`s${k % 6}`} x={x0} y={y(acc + v)} width={barW} height={y(acc) - y(acc + v)}>
                    <title>{`${day} · ${data.keys[k]}: ${format(v)}`}</title>
                  </rect>
                );
                acc += v;
                return r;
              })}
              {i % every === 0 && (
                <text class="axis" x={PAD.left + i * slot + slot / 2} y={H - 6} text-anchor="middle">
                  {shortDay(day)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <figcaption>
        <ul class="legend" aria-label={`${title} legend`}>
          {data.keys.map((k, i) => (
            <li key={k}>
              <span class={`swatch s${i % 6}`} aria-hidden="true" /> {k}
            </li>
          ))}
        </ul>
        <details>
          <summary>{title} as a table</summary>
          <table class="table">
            <thead>
              <tr>
                <th scope="col">Day</th>
                {data.keys.map((k) => (
                  <th scope="col" class="num" key={k}>
                    {k}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {data.labels.map((d, i) => (
                <tr key={d}>
                  <th scope="row">{d}</th>
                  {(data.values[i] ?? []).map((v, k) => (
                    <td class="num" key={k}>
                      {format(v)}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </details>
      </figcaption>
    </figure>
  );
}
