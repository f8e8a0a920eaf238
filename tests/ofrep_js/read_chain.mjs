// OpenFeature's JavaScript SDKs with the OFREP providers, reading the chain "chat" from a
// running control plane (tests/test_ofrep.py drives it): node read_chain.mjs BASE_URL TOKEN.
// The server SDK's provider evaluates one flag per call; the web SDK's polls the bulk
// evaluation with If-None-Match. Each line out is a JSON object; "changed" on stdin reads again.
import readline from 'node:readline';

import { OFREPProvider } from '@openfeature/ofrep-provider';
import { OFREPWebProvider } from '@openfeature/ofrep-web-provider';
import { OpenFeature } from '@openfeature/server-sdk';
import { OpenFeature as WebOpenFeature } from '@openfeature/web-sdk';

const [baseUrl, token] = process.argv.slice(2);
const headers = [['Authorization', `Bearer ${token}`]];
const statuses = [];
const counted = async (input, init) => {
  const response = await fetch(input, init);
  statuses.push(response.status);
  return response;
};
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

await OpenFeature.setProviderAndWait(new OFREPProvider({ baseUrl, headers }));
const server = OpenFeature.getClient();
const serverRead = async (key = 'chat') => {
  const details = await server.getObjectDetails(key, { fallback: true }, { targetingKey: 'checkout-7' });
  return { variant: details.variant ?? null, reason: details.reason, preset: details.value.preset ?? null,
    errorCode: details.errorCode ?? null };
};

await WebOpenFeature.setContext({ targetingKey: 'checkout-7' });
await WebOpenFeature.setProviderAndWait(
  new OFREPWebProvider({ baseUrl, headers, pollInterval: 200, fetchImplementation: counted, cacheMode: 'disabled' }),
);
const web = WebOpenFeature.getClient();
const webRead = () => {
  const details = web.getObjectDetails('chat', {});
  return { variant: details.variant ?? null, preset: details.value.preset ?? null };
};

say({ server: await serverRead(), missing: await serverRead('nope'), web: webRead() });
await sleep(1000); // the web provider polls meanwhile: nothing changed, so 304s
say({ statuses: [...statuses] });

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line !== 'changed') break;
  const seen = await serverRead();
  for (let waited = 0; waited < 5000 && webRead().variant !== seen.variant; waited += 100) await sleep(100);
  say({ server: seen, web: webRead(), statuses: [...statuses] });
}
await WebOpenFeature.close();
await OpenFeature.close();
process.exit(0);
