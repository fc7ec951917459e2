// The dashboard in a real browser, run by tests/dashboard.rs:
//   node dashboard.js DASHBOARD_URL MONGODB_URI TOKEN SCREENSHOT_DIR
// Debian's chromium, headless, driven by playwright-core. The Node driver
// makes traffic through wirelint that raises an N+1 (WL401); the page,
// opened with the admin token, must show it; then a large document (WL103)
// is written and read, and the open page must show that finding too on its
// own refresh (no reload). Prints one JSON line of what it saw; any failed
// expectation exits non-zero with the reason.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { chromium } = require('playwright-core');
const { MongoClient } = require('mongodb');

function check(ok, what) {
  if (!ok) throw new Error('expected: ' + what);
}

async function nPlusOne(db) {
  await db.collection('users').drop().catch(() => {});
  await db.collection('posts').drop().catch(() => {});
  const users = await db.collection('users').insertMany(
    ['ada', 'grace', 'linus', 'barbara', 'edsger'].map((name) => ({ name })));
  const ids = Object.values(users.insertedIds);
  await db.collection('posts').insertMany(
    Array.from({ length: 10 }, (_, i) => ({ title: `Post ${i}`, body: 'Lorem ipsum '.repeat(20), authorId: ids[i % ids.length] })));
  for (let view = 0; view < 4; view++) {
    const page = await db.collection('posts').find({}, { projection: { title: 1, authorId: 1 } })
      .sort({ _id: -1 }).limit(5).toArray();
    for (const post of page) await db.collection('users').findOne({ _id: post.authorId });
  }
}

async function largeDocument(db) {
  await db.collection('files').drop().catch(() => {});
  await db.collection('files').insertOne({ _id: 1, name: 'scan.pdf', data: 'x'.repeat(3 * 1024 * 1024) });
  await db.collection('files').findOne({ _id: 1 });
}

async function main(url, uri, token, shots) {
  fs.mkdirSync(shots, { recursive: true });
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 10000 });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const seen = {};
  try {
    const db = client.db('dashboard_test');
    await nPlusOne(db);

    const context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
    const page = await context.newPage();
    const origin = new URL(url).origin;
    const foreign = [];
    page.on('request', (r) => { if (!r.url().startsWith(origin)) foreign.push(r.url()); });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error' && !/401/.test(m.text())) errors.push(m.text()); });

    await page.goto(url);
    // The admin token is required: the page asks for it.
    await page.locator('#login').waitFor({ state: 'visible', timeout: 10000 });
    seen.asked_for_token = true;
    check((await page.locator('[data-finding]').count()) === 0, 'no data before the token');
    await page.fill('#token', token);
    await page.click('#login button');

    const n1 = page.locator('[data-finding^="WL401:"]');
    await n1.first().waitFor({ timeout: 15000 });
    seen.n_plus_one = (await n1.first().innerText()).split('\n')[0];
    const warned = page.locator('tr[data-pattern] td.verdict-warn');
    check((await warned.count()) >= 1, 'a pattern marked ⚠');
    seen.warned_pattern = await warned.first().innerText();
    check(/WL401/.test(seen.warned_pattern), '⚠ names WL401');
    // The page's request, rebuilt from the untagged traffic: the posts
    // list, then one users lookup per post.
    const request = page.locator('tr[data-pattern] .follow-ups');
    check((await request.count()) >= 1, 'a request with its follow-ups');
    seen.follow_ups = await request.first().innerText();
    seen.patterns = await page.locator('tr[data-pattern]').count();
    // What the analysis spent per call of each pattern: a time, never 0
    // for a pattern whose messages were analysed.
    const costs = await page.locator('tr[data-pattern] td[data-analysis]').allInnerTexts();
    check(costs.length === seen.patterns && costs.some((c) => /^[0-9.]+ (µs|ms)$/.test(c) && parseFloat(c) > 0),
      'the analysis cost per call of each pattern, not ' + JSON.stringify(costs));
    // Priced in request units (the proxy runs with target cosmos-ru): the
    // RU column is shown, with an estimate on every pattern.
    check(await page.locator('#ru-header').isVisible(), 'the RU / call column is shown');
    const ru = await page.locator('tr[data-pattern] td[data-ru]').allInnerTexts();
    check(ru.length === seen.patterns && ru.every((c) => /^[0-9.]+$/.test(c) && parseFloat(c) > 0),
      'an RU estimate per call on each pattern, not ' + JSON.stringify(ru));
    seen.request_units = ru;
    seen.analysed = await page.locator('[data-counter="analysed"] b').innerText();
    seen.analysis_cpu = await page.locator('[data-counter="analysis CPU"] b').innerText();
    check(seen.analysed === '100 %', 'every message analysed, not ' + seen.analysed);
    await page.locator('[data-finding^="WL401:"] details summary').first().click();
    await page.screenshot({ path: path.join(shots, 'dashboard.png'), fullPage: true });

    // A new finding shows up on the open page, without a reload.
    await page.evaluate(() => { window.__stillTheSamePage = true; });
    check((await page.locator('[data-finding^="WL103:"]').count()) === 0, 'no WL103 yet');
    await largeDocument(db);
    await page.locator('[data-finding^="WL103:"]').first().waitFor({ timeout: 15000 });
    check(await page.evaluate(() => window.__stillTheSamePage === true), 'the page refreshed itself, not reloaded');
    seen.large_document = (await page.locator('[data-finding^="WL103:"]').first().innerText()).split('\n')[0];
    await page.screenshot({ path: path.join(shots, 'dashboard-new-finding.png'), fullPage: true });

    check(foreign.length === 0, 'no request leaves wirelint (offline): ' + foreign.join(', '));
    check(errors.length === 0, 'no script errors: ' + errors.join('; '));
    console.log(JSON.stringify(seen));
  } finally {
    await browser.close();
    await client.close();
  }
}

main(...process.argv.slice(2)).catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
