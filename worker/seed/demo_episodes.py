"""The demo memory's content: handwritten sessions of three projects, each a small story (the
prompts, what the agent observed, the session's summary), as claude-mem records them.

Written by hand so that the demo reads like a real project's memory: no text is a template with
slots. A few topics come back in a later session (the nightly backups, the connection pool), as
they do in real work, so that a question can be answered from two sessions.
"""

# ruff: noqa: E501 - prose: each text stays on the lines it was written on
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Observation:
    """One observation: its type, texts, facts, concepts and the files read and modified."""

    type: str
    title: str
    subtitle: str
    narrative: str
    facts: tuple[str, ...]
    concepts: tuple[str, ...]
    files_read: tuple[str, ...]
    files_modified: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Summary:
    """A session's summary, field by field as claude-mem writes it."""

    request: str
    investigated: str
    learned: str
    completed: str
    next_steps: str
    notes: str = ""


@dataclass(frozen=True, slots=True)
class Episode:
    """One session: its prompts (the observations split between them in order) and summary."""

    prompts: tuple[str, ...]
    observations: tuple[Observation, ...]
    summary: Summary


O, S, E = Observation, Summary, Episode  # noqa: E741 - short names keep the episodes readable

PAYMENTS: tuple[Episode, ...] = (
    E(("The refund endpoint sometimes refunds the same charge again. Logs show the message broker "
       "delivered the refund.requested event more than once. Can you find out why and stop it?", "good. can you also write a test that delivers the same SQS message two times?"),
      (O("discovery", "Refund events arrive more than once from SQS", "At-least-once delivery, not a bug in our code",
         "The refund endpoint publishes refund.requested to SQS and the retry_queue worker consumes it. SQS "
         "guarantees at-least-once delivery, so a visibility timeout shorter than the Stripe call (about 8 s "
         "under load) makes the message visible again and a second worker picks it up.",
         ("SQS visibility timeout was 5 s", "Stripe refund calls take up to 8 s at p99",
          "Duplicate deliveries are expected with SQS standard queues"),
         ("how-it-works", "gotcha"), ("app/workers/retry_queue.py", "app/routes/refunds.py")),
       O("bugfix", "Refund worker is now idempotent on the event id", "Processed event ids are stored in Postgres",
         "Added a processed_events table keyed by the broker's event id. The worker inserts the id in the same "
         "transaction as the refund row and skips the message when the insert conflicts, so a redelivered event "
         "is acknowledged without calling Stripe again.",
         ("processed_events has a unique index on event_id", "Duplicates are acked and logged at info level"),
         ("problem-solution", "pattern"), ("app/workers/retry_queue.py",),
         ("app/workers/retry_queue.py", "migrations/0043_processed_events.sql")),
       O("change", "Visibility timeout raised to 30 s for the refunds queue", "Terraform change in the infra repo",
         "Raising the timeout does not remove duplicates but makes them rare; idempotency is still the real fix.",
         ("refunds queue visibility timeout is now 30 s",), ("trade-off",), ("app/workers/retry_queue.py",)),
       O("change", "Test delivers one refund message two times", "Asserts a single Stripe call",
         "test_refund_redelivery feeds the consumer the same message twice over with a stubbed Stripe client and "
         "checks one refund row and one API call.", ("uses the stripe_stub fixture",), ("pattern",),
         ("tests/test_retry_queue.py",), ("tests/test_retry_queue.py",))),
      S("Stop the refund endpoint from refunding a charge more than once.",
        "The SQS consumer in app/workers/retry_queue.py and the delivery logs for three duplicate refunds.",
        "SQS delivers at least once; a 5 s visibility timeout against 8 s Stripe calls made redeliveries common.",
        "Idempotent consumer using a processed_events table, and a longer visibility timeout.",
        "Backfill: find the 14 refunds issued in duplicate last month and open tickets for finance.")),
    E(("Requests to /charges started timing out this morning, p99 went from 300 ms to 12 s. Nothing was "
       "deployed. Please look at the database side.",
       "ok so it is pgbouncer. what pool mode are we using and is it right for us?"),
      (O("discovery", "Charges timeouts come from pgbouncer running out of server connections",
         "The app waited on the pool, not on Postgres",
         "pg_stat_activity showed only 20 active sessions while pgbouncer's SHOW POOLS reported 140 clients "
         "waiting. The nightly reconciliation job opens long transactions and holds server connections for "
         "minutes, starving the API.",
         ("pgbouncer default_pool_size is 20", "reconciliation job holds transactions for up to 4 minutes"),
         ("how-it-works", "problem-solution"), ("app/db/session.py", "deploy/pgbouncer.ini")),
       O("decision", "Keep pgbouncer in transaction mode, give reconciliation its own pool",
         "Session mode would waste connections",
         "Transaction pooling is right for the API: requests are short and we use no session state. The "
         "reconciliation job now connects through a separate pgbouncer database entry with its own pool of 5, "
         "so it can no longer starve the request path.",
         ("reconciliation uses the payments_batch pool", "API keeps transaction pooling"),
         ("trade-off", "why-it-exists"), ("deploy/pgbouncer.ini",), ("deploy/pgbouncer.ini", "app/jobs/reconcile.py")),
       O("discovery", "Prepared statements break under transaction pooling",
         "asyncpg caches statements per connection",
         "With pgbouncer in transaction mode asyncpg's statement cache hands a prepared statement to a "
         "different server connection and fails with 'prepared statement does not exist'. Setting "
         "statement_cache_size=0 on the engine avoids it.",
         ("statement_cache_size=0 is set in app/db/session.py",), ("gotcha",), ("app/db/session.py",),
         ("app/db/session.py",)),
       O("change", "Grafana panel for pgbouncer client waits", "Exported from SHOW POOLS by pgbouncer_exporter",
         "cl_waiting and sv_active per database are now on the payments dashboard next to request latency, so "
         "pool starvation is visible at a glance.", ("exporter runs as a sidecar on port 9127",), ("what-changed",),
         ("deploy/pgbouncer.ini",), ("deploy/monitoring/pgbouncer-exporter.yaml",))),
      S("Find why /charges timed out with no deploy, and check the pgbouncer pool mode.",
        "pg_stat_activity, pgbouncer SHOW POOLS, the reconciliation job's transactions.",
        "A long batch transaction can starve a transaction-mode pool; asyncpg needs its statement cache off "
        "behind pgbouncer.",
        "Separate pool for reconciliation, statement cache disabled, p99 back to 310 ms.",
        "Add an alert on pgbouncer cl_waiting above 10.")),
    E(("Add an endpoint to export an invoice as PDF. Finance wants the same layout as the email receipt.", "finance says the VAT number is missing on the PDF"),
      (O("feature", "GET /invoices/{id}/pdf renders with WeasyPrint", "Reuses the receipt's Jinja template",
         "The PDF is rendered from templates/receipt.html with a print stylesheet, so finance gets the layout "
         "they already know. Rendering takes about 400 ms, so the result is cached in S3 by invoice id and "
         "version.", ("WeasyPrint needs pango in the Docker image", "PDFs are cached under invoices/{id}/{version}.pdf"),
         ("what-changed",), ("app/routes/invoices.py", "templates/receipt.html"),
         ("app/routes/invoices.py", "app/services/pdf.py", "Dockerfile")),
       O("bugfix", "Euro amounts printed with a dot instead of a comma", "Locale comes from the account, not the server",
         "The first PDFs formatted 1.234,50 EUR as 1,234.50 because Babel used the container's locale. The "
         "invoice now formats amounts with the account's locale.",
         ("format_currency takes locale=account.locale",), ("gotcha",), ("app/services/pdf.py",),
         ("app/services/pdf.py",)),
       O("change", "Dockerfile installs pango and fonts-dejavu", "Image grows by 38 MB",
         "WeasyPrint silently fell back to a bitmap font without fonts installed; the image now ships DejaVu.",
         ("image size went from 212 MB to 250 MB",), ("trade-off",), ("Dockerfile",), ("Dockerfile",)),
       O("bugfix", "VAT id printed under the company address", "Came from the account settings, not the invoice",
         "The receipt template reads account.vat_id, which the PDF context never passed. The field is included "
         "and shown only for accounts inside the EU.", ("EU check uses the account country",), ("problem-solution",),
         ("templates/receipt.html",), ("app/services/pdf.py", "templates/receipt.html"))),
      S("Invoice PDF export with the receipt's layout.",
        "WeasyPrint versus a headless browser, the receipt template, locale handling in Babel.",
        "WeasyPrint is enough for static layouts; currency formatting must follow the account's locale.",
        "GET /invoices/{id}/pdf with S3 caching and tests for EUR and USD accounts.",
        "Ask finance whether credit notes need the same export.")),
    E(("our stripe webhook handler returns 400 for some events in production but never locally. here is the "
       "log line: 'No signatures found matching the expected signature for payload'", "also we should not return 400 to stripe for events we do not handle, right?"),
      (O("discovery", "Webhook signature check fails after the body is parsed",
         "FastAPI's JSON parsing changes the raw payload",
         "The handler verified the signature against json.dumps(await request.json()), which reorders keys "
         "and changes whitespace. Locally the Stripe CLI sends small payloads that happen to round-trip.",
         ("Signature verification needs the exact raw body",), ("gotcha", "how-it-works"),
         ("app/routes/webhooks.py",)),
       O("bugfix", "Verify Stripe signatures on request.body()", "Parse JSON only after verification",
         "construct_event now receives the raw bytes and the Stripe-Signature header; the parsed event comes "
         "from Stripe's library. A regression test replays a captured production payload.",
         ("tests/fixtures/stripe_invoice_paid.json holds the replayed payload",), ("problem-solution",),
         ("app/routes/webhooks.py",), ("app/routes/webhooks.py", "tests/test_webhooks.py")),
       O("discovery", "The endpoint secret in staging was the live one", "Staging would have rejected every event",
         "While checking the config we found STRIPE_WEBHOOK_SECRET in staging copied from production.",
         ("staging now has its own whsec_ secret",), ("gotcha",), ("deploy/staging.env",)),
       O("change", "Unhandled events answered with 200", "Stripe disables endpoints that keep failing",
         "Returning 400 for unhandled events made Stripe retry them for three days and count the endpoint as failing; "
         "they are now acknowledged and logged at debug level.", ("handled: invoice.paid, charge.refunded, payout.paid",),
         ("why-it-exists",), ("app/routes/webhooks.py",), ("app/routes/webhooks.py",))),
      S("Fix the 400 responses of the Stripe webhook handler in production.",
        "The handler's verification code, a failing payload from the logs, the staging settings.",
        "Signatures are computed over the raw body; any re-serialisation breaks them.",
        "Verification on the raw body, a replay test, and the staging secret corrected.",
        "Replay the events Stripe marked as failed in the last three days.")),
    E(("We need idempotency keys on POST /charges. Mobile clients retry on flaky networks and we have "
       "seen the same charge created again.", "should the key expire? how long does stripe keep theirs"),
      (O("feature", "Idempotency-Key header on POST /charges", "Responses stored for replay",
         "A request with a key we have seen returns the stored status and body instead of running again. "
         "Keys are scoped to the API client so two clients cannot collide.",
         ("idempotency_keys table stores status, body and a request hash",
          "A reused key with a different body returns 422"),
         ("pattern", "what-changed"), ("app/routes/charges.py",),
         ("app/routes/charges.py", "app/services/idempotency.py", "migrations/0044_idempotency_keys.sql")),
       O("discovery", "Stripe keeps idempotency keys for 24 hours", "Checked in their API reference",
         "Stripe prunes keys after 24 hours; a retry after that is treated as new. We match it so a client "
         "gets the same behaviour from us and from Stripe.", ("keys older than 24 h are deleted hourly",),
         ("why-it-exists",), ("app/services/idempotency.py",)),
       O("decision", "Concurrent requests with one key get 409 while the first runs", "No waiting inside the API",
         "Two requests with the same key that arrive together: the second sees a row in state 'running' and "
         "gets 409 Conflict with Retry-After: 1, rather than blocking a worker.",
         ("row lock taken with SELECT ... FOR UPDATE SKIP LOCKED",), ("trade-off",),
         ("app/services/idempotency.py",), ("app/services/idempotency.py",)),
       O("change", "Pruning job for expired idempotency keys", "Runs hourly from the scheduler",
         "The table would grow by about 90k rows a day; an hourly job deletes keys past 24 hours in batches of "
         "5,000.", ("prune_idempotency_keys runs at minute 7",), ("what-changed",), ("app/jobs/scheduler.py",),
         ("app/jobs/scheduler.py",))),
      S("Idempotency keys for POST /charges so mobile retries cannot charge again.",
        "Stripe's idempotency semantics, our charge flow, concurrent retries from the iOS client.",
        "Keys need a request hash to catch misuse, and a 24 hour lifetime matches Stripe.",
        "Idempotency-Key support, 409 for in-flight duplicates, hourly pruning, tests for each case.",
        "Tell the mobile team to send the header from the next release.")),
    E(("Rounding is off by a cent on some invoices with tax. Example: 3 items at 19.99 with 8.25% tax gives "
       "64.92 on the invoice and 64.91 in Stripe.", "which invoices were affected?"),
      (O("discovery", "Tax was rounded per line on invoices and on the total in Stripe",
         "Two rounding strategies for the same amount",
         "invoice.py rounds the tax of each line and sums; Stripe computes tax on the subtotal and rounds once. "
         "With three lines the half-cents add up to a one cent difference.",
         ("Stripe Tax rounds at the invoice level",), ("how-it-works",), ("app/models/invoice.py",)),
       O("bugfix", "Invoices compute tax on the subtotal with ROUND_HALF_EVEN",
         "Amounts kept as integer cents until the end",
         "Line amounts stay in cents, tax is computed once on the subtotal as a Decimal and rounded half-even, "
         "matching Stripe. A property test compares both computations on random carts.",
         ("test_invoice_rounding uses hypothesis with carts of 1-20 lines",), ("problem-solution",),
         ("app/models/invoice.py",), ("app/models/invoice.py", "tests/test_invoice_rounding.py")),
       O("discovery", "312 invoices last quarter differ by one cent", "All with three or more taxed lines",
         "A query comparing stored totals with a recomputation lists them; none differ by more than a cent.",
         ("list exported to finance as a CSV",), ("what-changed",), ("app/models/invoice.py",))),
      S("Fix the one cent difference between our invoices and Stripe.",
        "Invoice totals with tax for multi-line carts, Stripe Tax's documentation.",
        "Per-line rounding and total rounding disagree; the ledger must follow the processor.",
        "Tax computed on the subtotal, half-even rounding, a property test.",
        "Check the 312 invoices of last quarter that differ by a cent and issue credit notes if finance agrees.")),
    E(("JWT validation is slow, profiling shows we fetch the JWKS on every request.",),
      (O("discovery", "JWKS fetched from Auth0 on every request", "No caching in the token validator",
         "auth/tokens.py calls the JWKS endpoint inside validate(), adding 80-120 ms to each authenticated "
         "call and making us depend on Auth0's availability for every request.",
         ("JWKS endpoint latency is 80-120 ms from eu-west-1",), ("problem-solution",), ("app/auth/tokens.py",)),
       O("refactor", "Signing keys cached for 10 minutes, refetched on unknown kid",
         "Key rotation still works without a restart",
         "The validator keeps the key set in memory for 10 minutes. A token whose kid is not in the cache "
         "triggers one refetch, rate limited to once a minute so bad tokens cannot hammer Auth0.",
         ("cache TTL 600 s", "refetch on unknown kid at most once per 60 s"),
         ("pattern",), ("app/auth/tokens.py",), ("app/auth/tokens.py", "tests/test_tokens.py")),
       O("discovery", "Clock skew made some tokens invalid for a few seconds", "Leeway added",
         "Tokens minted by Auth0 were occasionally rejected as 'not yet valid' because our nodes ran 2-3 s "
         "behind. PyJWT now gets leeway=10.", ("leeway of 10 s on iat and nbf",), ("gotcha",),
         ("app/auth/tokens.py",), ("app/auth/tokens.py",)),
       O("change", "Benchmark for token validation in the test suite", "Guards against the cache being bypassed again",
         "A pytest-benchmark case validates 1,000 tokens and fails above 50 ms in total.", ("bench marker: slow",),
         ("pattern",), ("tests/bench_tokens.py",), ("tests/bench_tokens.py",))),
      S("Make JWT validation fast.", "The token validator and a py-spy profile of the API under load.",
        "Key sets can be cached with refetch on unknown key ids; nodes drift by a few seconds.",
        "JWKS cache with guarded refetch and 10 s leeway; auth overhead down from 110 ms to under 1 ms.",
        "")),
    E(("The nightly reconciliation between our ledger and Stripe payouts reports 3 mismatches every day. "
       "Can you check if they are real?",
       "makes sense. can we make the report ignore those?"),
      (O("discovery", "Reconciliation mismatches are payouts that cross midnight UTC",
         "Not real discrepancies",
         "The job compares ledger entries and payouts for one calendar day in UTC, but Stripe's payout "
         "includes charges up to its own cutoff at 00:00 in the account's timezone (Europe/Berlin). Charges "
         "between 23:00 and 24:00 UTC land in the next payout.",
         ("Stripe payout cutoff follows the account timezone",), ("how-it-works", "gotcha"),
         ("app/jobs/reconcile.py",)),
       O("change", "Reconciliation matches by balance transaction, not by date",
         "Each payout's balance transactions are fetched",
         "Instead of day windows the job lists the balance transactions of each payout and matches them to "
         "ledger entries by charge id, so timing differences disappear and real gaps still show.",
         ("uses stripe.BalanceTransaction.list(payout=...)",), ("what-changed",), ("app/jobs/reconcile.py",),
         ("app/jobs/reconcile.py", "tests/test_reconcile.py")),
       O("discovery", "Payout reports include fees as separate lines", "Matched against the fee ledger account",
         "Stripe fees appear as their own balance transactions marked stripe_fee; the job books them to the fees "
         "account instead of reporting them as missing income.", ("fee account: 6815",), ("how-it-works",),
         ("app/jobs/reconcile.py",), ("app/jobs/reconcile.py",))),
      S("Find out whether the daily reconciliation mismatches are real.",
        "Three days of mismatches against Stripe's payout reports.",
        "Day windows in UTC do not line up with payouts cut in Berlin time.",
        "Matching by balance transaction; the last week reconciles with zero mismatches.",
        "Delete the old day-window code after a month of clean reports.")),
    E(("Write a migration to add a refunds table. Right now refunds live as negative charges and that is "
       "confusing the reports.", "how do we know the backfill copied everything?"),
      (O("feature", "refunds table with a foreign key to charges", "Negative charges migrated",
         "Migration 0045 creates refunds (id, charge_id, amount_cents, reason, status, created_at) and moves "
         "the 2,381 negative charge rows into it inside one transaction.",
         ("refunds.amount_cents is positive", "charge_id has ON DELETE RESTRICT"),
         ("what-changed",), ("migrations/0045_refunds_table.sql",), ("migrations/0045_refunds_table.sql",)),
       O("decision", "Migration runs online with a backfill in batches", "No maintenance window needed",
         "Copying in one statement would lock charges for about 40 s. The migration creates the table, a "
         "trigger keeps new negative charges mirrored, and a script backfills 1,000 rows at a time.",
         ("backfill script: scripts/backfill_refunds.py",), ("trade-off",), ("migrations/0045_refunds_table.sql",),
         ("scripts/backfill_refunds.py",)),
       O("refactor", "Reports read refunds from the new table", "Revenue query no longer filters amount < 0",
         "The revenue report subtracted negative charges; it now joins refunds, which also fixes partial "
         "refunds that were counted as full.", ("partial refunds were overstated by 4,120 EUR in October",),
         ("problem-solution",), ("app/reports/revenue.py",), ("app/reports/revenue.py",))),
      S("Give refunds their own table.", "How refunds were stored and which reports read them.",
        "Partial refunds were overstated by the old representation.",
        "Migration 0045 with an online backfill; revenue report rewritten on the new table.",
        "Drop the mirroring trigger once the backfill is verified in production.")),
    E(("Can you explain how the retry queue decides when to give up on a failed Stripe call?", "what happens to the dead letters after that?"),
      (O("discovery", "Retry queue uses exponential backoff capped at one hour", "Gives up after 8 attempts",
         "retry_queue.py reschedules a failed call with delay 2^n seconds plus jitter, capped at 3,600 s. After "
         "8 attempts the job moves to the dead letter table and pages the on-call if the amount is over 1,000 EUR.",
         ("max attempts 8", "dead letters are in failed_jobs", "jitter is up to 20 % of the delay"),
         ("how-it-works",), ("app/workers/retry_queue.py", "app/workers/dead_letter.py")),
       O("discovery", "Card declines are not retried at all", "Only network errors and 5xx are",
         "stripe.error.CardError is treated as final, which is right: retrying a decline can look like fraud to "
         "the issuer.", ("CardError, InvalidRequestError: no retry",), ("why-it-exists",),
         ("app/workers/retry_queue.py",)),
       O("discovery", "Dead letters are replayed by hand from the admin app", "No automatic replay",
         "An operator opens failed_jobs in the admin app, checks the error and presses replay, which resets the "
         "attempt counter. Nothing replays them automatically.", ("replay button calls POST /admin/jobs/{id}/replay",),
         ("how-it-works",), ("app/workers/dead_letter.py", "admin/views/jobs.py"))),
      S("Explain when the retry queue gives up.", "retry_queue.py and the dead letter handling.",
        "Backoff doubles up to an hour, 8 attempts, declines are never retried.",
        "Wrote the explanation into docs/retries.md.", "", "docs/retries.md now has the retry table.")),
    E(("The test suite takes 9 minutes on CI. Most of it seems to be the database fixtures. Any quick wins?", "nice. the two serial tests, can you check why they commit?"),
      (O("discovery", "Every test recreates the schema from migrations", "45 migrations per test module",
         "conftest.py runs alembic upgrade head for each module. On CI that is 3.1 s per module and 120 "
         "modules.", ("alembic upgrade head takes 3.1 s",), ("problem-solution",), ("tests/conftest.py",)),
       O("refactor", "Schema created once per session, each test inside a rolled back transaction",
         "Nested transactions with SAVEPOINT",
         "The session fixture migrates once; each test opens a connection, begins a transaction and a "
         "SAVEPOINT, and rolls back at the end. Tests that commit are restarted on a new savepoint.",
         ("tests no longer see each other's rows",), ("pattern",), ("tests/conftest.py",), ("tests/conftest.py",)),
       O("change", "pytest-xdist with 4 workers on CI", "Each worker has its own database",
         "Workers get payments_test_gw0..gw3 created from a template database, so creation is a file copy.",
         ("CI time 9 min 10 s -> 2 min 40 s",), ("what-changed",), (".github/workflows/test.yml",),
         (".github/workflows/test.yml", "tests/conftest.py"))),
      S("Speed up the payments test suite on CI.", "The fixtures' timing with --durations and a CI log.",
        "Migrating per module dominated; template databases make per-worker setup cheap.",
        "Session-scoped schema, rollback per test, xdist: CI down to 2 min 40 s.",
        "Two tests rely on committed data and are marked serial; rewrite them.")),
    E(("Upgrade pydantic from v1 to v2 in payments-api.", "the settings class broke, BaseSettings is gone?"),
      (O("change", "pydantic 2.7 with bump-pydantic for the models", "Most changes were automatic",
         "bump-pydantic rewrote 61 files: validator to field_validator, Config classes to model_config, "
         ".dict() to .model_dump(). Six custom validators needed hand edits because they used values=.",
         ("61 files rewritten", "6 validators fixed by hand"), ("what-changed",), ("app/models/invoice.py",),
         ("app/models/invoice.py", "app/models/charge.py")),
       O("discovery", "BaseSettings moved to the pydantic-settings package", "A separate dependency in v2",
         "from pydantic import BaseSettings raises in v2; settings now come from pydantic_settings and env "
         "prefixes are set in model_config.", ("pydantic-settings 2.2 added",), ("gotcha",), ("app/config.py",),
         ("app/config.py", "pyproject.toml")),
       O("discovery", "Serialisation of Decimal changed", "v2 dumps Decimal as a string in JSON mode",
         "API responses started returning amounts as \"19.99\" instead of 19.99; the response models now use "
         "a PlainSerializer to keep numbers.", ("Amount = Annotated[Decimal, PlainSerializer(float)]",),
         ("gotcha", "problem-solution"), ("app/models/charge.py",), ("app/models/charge.py",)),
       O("change", "mypy plugin switched to pydantic.mypy for v2", "Two new mypy errors fixed",
         "The v2 plugin caught an Optional field passed where a str was required in the charge service.",
         ("plugins = pydantic.mypy in mypy.ini",), ("what-changed",), ("mypy.ini",), ("mypy.ini", "app/services/charges.py"))),
      S("Move payments-api to pydantic v2.", "The bump-pydantic output, settings loading, API response diffs.",
        "BaseSettings is a separate package; Decimal serialises as a string unless told otherwise.",
        "Upgrade merged with snapshot tests of every response model.", "Remove the v1 compatibility shim.")),
    E(("add rate limiting to the public API. 100 requests per minute per API key, redis is available", "what do clients see when they hit the limit?"),
      (O("feature", "Sliding window rate limiter in Redis", "A sorted set per API key",
         "Each request adds its timestamp to a sorted set, trims entries older than 60 s and counts. Over 100 "
         "returns 429 with Retry-After. The three commands run in one MULTI so the count is consistent.",
         ("key: ratelimit:{api_key}", "limit 100 per 60 s", "429 carries X-RateLimit-Remaining: 0"),
         ("pattern",), ("app/middleware/ratelimit.py",), ("app/middleware/ratelimit.py",)),
       O("decision", "Fail open when Redis is unreachable", "Availability over strictness",
         "If Redis times out after 50 ms the request goes through and a counter is incremented; rejecting all "
         "traffic because the limiter is down would be worse than a few minutes without limits.",
         ("ratelimit_fail_open_total metric",), ("trade-off",), ("app/middleware/ratelimit.py",),
         ("app/middleware/ratelimit.py",)),
       O("change", "Internal callers exempt by network", "Workers and the admin app skip the limiter",
         "Requests from the 10.20.0.0/16 service network are not counted.", ("exemption list in settings",),
         ("what-changed",), ("app/config.py",), ("app/config.py",))),
      S("Rate limit the public API per key.", "Fixed window versus sliding window, Redis options.",
        "A sorted set gives an exact sliding window at our volume; the limiter must not take the API down.",
        "Sliding window limiter, fail-open with a metric, internal traffic exempt.",
        "Load test at 2,000 requests per second before enabling it for all keys.")),
    E(("Again timeouts on the charges endpoint, this time only between 02:00 and 02:20. is it pgbouncer again?",),
      (O("discovery", "Not pgbouncer this time: autovacuum on the charges table",
         "The pool had idle connections throughout",
         "pgbouncer showed no waiting clients. The slow window matches an autovacuum of charges, which has "
         "48 million rows; the vacuum's I/O slows the index scans of the charges list query.",
         ("charges has 48 M rows", "autovacuum took 19 minutes"), ("problem-solution",),
         ("app/routes/charges.py",)),
       O("change", "Autovacuum tuned for the charges table", "Smaller, more frequent runs",
         "autovacuum_vacuum_scale_factor lowered to 0.01 and cost limit raised for charges, so vacuum runs "
         "more often and finishes in about 2 minutes.", ("ALTER TABLE charges SET (autovacuum_vacuum_scale_factor = 0.01)",),
         ("trade-off",), ("migrations/0046_charges_autovacuum.sql",), ("migrations/0046_charges_autovacuum.sql",)),
       O("discovery", "The charges list query sorts 48 M rows without an index on created_at", "Index added concurrently",
         "EXPLAIN showed a sort step on created_at for the newest-first list; CREATE INDEX CONCURRENTLY on "
         "(account_id, created_at DESC) turned it into an index scan.", ("index: charges_account_created_idx",),
         ("problem-solution",), ("app/routes/charges.py",), ("migrations/0047_charges_created_idx.sql",))),
      S("Find the cause of the 02:00 timeouts on the charges endpoint.",
        "pgbouncer's pools during the window, pg_stat_progress_vacuum, the query plans.",
        "Large tables need per-table autovacuum settings; the defaults run rarely and long.",
        "Per-table autovacuum settings; no timeouts in the two nights since.",
        "Partition charges by month before it reaches 100 M rows.")),
)

DASHBOARD: tuple[Episode, ...] = (
    E(("The dark mode toggle forgets the choice after a reload. Users flip it on, refresh, and it is light again.", "does it work with the system setting too?"),
      (O("discovery", "Theme preference was kept only in React state", "Nothing persisted it",
         "ThemeProvider initialises from prefers-color-scheme and the toggle calls setTheme, but the value "
         "never reaches localStorage, so every reload starts from the system preference.",
         ("ThemeProvider lives in src/theme/ThemeProvider.tsx",), ("how-it-works",),
         ("src/theme/ThemeProvider.tsx", "src/components/Header.tsx")),
       O("bugfix", "Theme saved to localStorage and read before first paint", "No flash of the light theme",
         "The toggle writes 'theme' to localStorage. An inline script in index.html sets data-theme on <html> "
         "before React loads, otherwise the page flashed white for about 200 ms.",
         ("inline script is 6 lines in index.html", "key name: theme, values light | dark | system"),
         ("problem-solution", "gotcha"), ("index.html",), ("src/theme/ThemeProvider.tsx", "index.html")),
       O("change", "Charts pick their palette from CSS variables", "Recharts colours were hardcoded",
         "ChartPanel passed hex colours; it now reads --chart-1..--chart-6 so the charts follow the theme.",
         ("palette defined in src/theme/tokens.css",), ("what-changed",), ("src/components/ChartPanel.tsx",),
         ("src/components/ChartPanel.tsx", "src/theme/tokens.css")),
       O("feature", "Third option follows the operating system", "matchMedia listener updates it live",
         "The toggle cycles light, dark and system; with system selected a matchMedia listener switches as soon as "
         "the OS changes, for instance at sunset on macOS.", ("default for new users: system",), ("what-changed",),
         ("src/components/Header.tsx",), ("src/components/Header.tsx", "src/theme/ThemeProvider.tsx"))),
      S("Make the dark mode toggle survive a reload.", "ThemeProvider, the toggle in the header, chart colours.",
        "The theme must be applied before React mounts to avoid a flash.",
        "Preference persisted in localStorage, applied by an inline script, charts themed.",
        "Sync the preference to the user profile so it follows people across devices.")),
    E(("The metrics page freezes for a second every 10 s. I think it is the polling hook.",),
      (O("discovery", "useMetrics refetches all series and re-renders every chart", "30 charts, 2,000 points each",
         "The hook replaces the whole metrics object on each poll, so every ChartPanel re-renders even when its "
         "series did not change. The React profiler shows 900 ms of rendering per poll.",
         ("poll interval 10 s", "900 ms render per poll"), ("problem-solution",),
         ("src/hooks/useMetrics.ts", "src/pages/Metrics.tsx")),
       O("refactor", "Polling moved to TanStack Query with structural sharing", "Unchanged series keep identity",
         "useQuery with refetchInterval keeps references for unchanged parts of the response, and ChartPanel is "
         "wrapped in memo, so only charts whose data changed re-render.",
         ("render per poll now 60 ms",), ("pattern",), ("src/hooks/useMetrics.ts",),
         ("src/hooks/useMetrics.ts", "src/components/ChartPanel.tsx")),
       O("change", "Polling pauses when the tab is hidden", "refetchIntervalInBackground is false",
         "Background tabs were polling all night and keeping laptops awake.", ("saves ~8,600 requests a day per idle tab",),
         ("what-changed",), ("src/hooks/useMetrics.ts",), ("src/hooks/useMetrics.ts",)),
       O("discovery", "Chart animations cost 200 ms per update", "Disabled for live updates",
         "Recharts animates every series change; for polled data the animation is turned off, keeping it for the "
         "first render only.", ("isAnimationActive={firstRender}",), ("trade-off",), ("src/components/ChartPanel.tsx",),
         ("src/components/ChartPanel.tsx",))),
      S("Stop the metrics page from freezing on each poll.", "The React profiler trace and useMetrics.",
        "Replacing a whole response object defeats memoisation; structural sharing keeps it.",
        "TanStack Query polling, memoised charts, no polling in hidden tabs.", "")),
    E(("Users on Safari 15 see a blank page after login. Can you reproduce on BrowserStack?",
       "yes please fix it without dropping support, some clinics are on managed iPads"),
      (O("discovery", "Blank page on Safari 15 from a regex lookbehind", "SyntaxError at parse time",
         "src/utils/format.ts uses (?<=) in a regular expression; Safari before 16.4 cannot parse lookbehind, "
         "so the whole bundle fails to load and the page stays blank.",
         ("Safari supports lookbehind from 16.4",), ("gotcha",), ("src/utils/format.ts",)),
       O("bugfix", "Lookbehind replaced by a capture group", "Same output, parses everywhere",
         "The thousands separator regex now captures the preceding digit and puts it back in the replacement.",
         ("unit tests cover 0, 999, 1000 and negative numbers",), ("problem-solution",),
         ("src/utils/format.ts",), ("src/utils/format.ts", "src/utils/format.test.ts")),
       O("change", "Vite build target set to safari15", "esbuild now fails on unsupported syntax",
         "build.target includes safari15, so a construct Safari 15 cannot run breaks the build instead of a "
         "page in production.", ("vite.config.ts build.target: ['es2020', 'safari15']",),
         ("why-it-exists",), ("vite.config.ts",), ("vite.config.ts",))),
      S("Fix the blank page after login on Safari 15.", "BrowserStack sessions on iPadOS 15 and the console error.",
        "One regex lookbehind is enough to break the whole bundle on older Safari.",
        "Regex rewritten; the build target makes the same mistake a build error.",
        "Add an iPadOS 15 run to the end-to-end tests.")),
    E(("DataTable with 50k rows is unusable. Scrolling stutters and sorting takes seconds.", "can you make the column widths resizable without it getting slow again?"),
      (O("feature", "DataTable virtualised with TanStack Virtual", "Only visible rows are in the DOM",
         "The table rendered every row; it now renders about 40 plus an overscan of 10. Row height is fixed at "
         "36 px so offsets need no measurement.", ("DOM nodes went from 400k to 3k",), ("what-changed",),
         ("src/components/DataTable.tsx",), ("src/components/DataTable.tsx",)),
       O("bugfix", "Sorting moved off the main thread", "A Web Worker sorts and returns indexes",
         "Sorting 50k objects by a string column took 1.8 s in the render path. A worker returns the sorted "
         "index array, and the table shows a spinner in the header while it runs.",
         ("sort of 50k rows: 1.8 s on the main thread, 240 ms in the worker",), ("problem-solution",),
         ("src/components/DataTable.tsx",), ("src/workers/sort.worker.ts", "src/components/DataTable.tsx")),
       O("discovery", "Sticky header broke with virtualisation", "position: sticky needs the scroll container",
         "The header stuck to the window instead of the table; the scroll container now wraps both.",
         (), ("gotcha",), ("src/components/DataTable.tsx",), ("src/components/DataTable.tsx",)),
       O("feature", "Column resizing through CSS variables", "No React render while dragging",
         "Dragging a column edge updates a CSS custom property on the table element; React state is written once "
         "when the drag ends.", ("--col-N-width variables",), ("pattern",), ("src/components/DataTable.tsx",),
         ("src/components/DataTable.tsx",))),
      S("Make DataTable usable at 50k rows.", "Rendering cost, sort cost, the sticky header.",
        "Fixed row heights make virtualisation simple; sorting belongs in a worker at this size.",
        "Virtualised rows, worker sorting, header fixed.", "Column resizing still re-renders everything.")),
    E(("After login people land on / instead of the page they asked for. The redirect param gets lost.", "does this also work when the login happens in a popup?"),
      (O("discovery", "redirect parameter dropped by the OAuth callback", "State was not round-tripped",
         "ProtectedRoute sends people to /login?redirect=/reports/42, but the login page starts the OAuth flow "
         "without putting the path in the state parameter, so the callback has nowhere to go back to.",
         ("OAuth state carries a nonce only",), ("how-it-works",), ("src/auth/ProtectedRoute.tsx", "src/pages/Login.tsx")),
       O("bugfix", "Return path kept in sessionStorage across the OAuth round trip", "Validated as a relative path",
         "The login page stores the path before redirecting; the callback reads it and navigates there. Only "
         "paths starting with a single slash are accepted, so the parameter cannot send anyone to another site.",
         ("open redirect check: /^\\/(?!\\/)/",), ("problem-solution", "gotcha"), ("src/pages/AuthCallback.tsx",),
         ("src/pages/Login.tsx", "src/pages/AuthCallback.tsx")),
       O("discovery", "The popup flow never used the return path", "The opener keeps its own location",
         "With the popup the main window never navigates away, so it already stays on the page; only the redirect "
         "flow needed the fix.", (), ("how-it-works",), ("src/pages/Login.tsx",))),
      S("Send people back to the page they asked for after login.", "ProtectedRoute, Login and the OAuth callback.",
        "The return path has to survive the identity provider round trip, and must be validated.",
        "Return path in sessionStorage with an open redirect guard, and tests.", "")),
    E(("The bundle is 2.3 MB. Lighthouse says time to interactive is 7 s on mobile. Where does the size come from?",),
      (O("discovery", "moment with all locales is 290 kB of the bundle", "Found with rollup-plugin-visualizer",
         "The treemap shows moment and its 130 locales, lodash imported whole, and the PDF viewer loaded on "
         "every page although only the invoices page uses it.",
         ("moment + locales: 290 kB", "lodash: 71 kB", "pdfjs: 610 kB"), ("problem-solution",), ("vite.config.ts",)),
       O("refactor", "moment replaced by date-fns, lodash imports per function", "Tree shaking works again",
         "date-fns functions are imported one by one; import { debounce } from 'lodash-es' replaces the "
         "default import.", ("date-fns adds 18 kB for the functions we use",), ("what-changed",),
         ("src/utils/dates.ts",), ("src/utils/dates.ts", "package.json")),
       O("change", "PDF viewer loaded with React.lazy on the invoices route", "Split into its own chunk",
         "pdfjs now downloads only when an invoice preview opens.", ("main chunk 2.3 MB -> 780 kB",),
         ("what-changed",), ("src/pages/Invoices.tsx",), ("src/pages/Invoices.tsx",)),
       O("change", "Bundle size budget in CI", "size-limit fails the build above 850 kB",
         "size-limit runs after the build and comments the difference on the pull request.", ("limit: 850 kB for the main chunk",),
         ("why-it-exists",), ("package.json",), (".size-limit.json", ".github/workflows/web.yml"))),
      S("Cut the dashboard's bundle size.", "A visualizer treemap and Lighthouse on a throttled profile.",
        "Three dependencies made up most of the weight; one was needed on a single page.",
        "Bundle down to 780 kB, mobile time to interactive 2.9 s.", "Add a size budget check to CI.")),
    E(("Translate the settings page to German. The strings are still inline in the JSX.", "who checks the translations before release?"),
      (O("refactor", "Settings strings moved to i18n/en.json", "react-i18next with namespaces",
         "132 strings extracted into the settings namespace; keys follow the component tree (settings.profile."
         "email.label).", ("132 strings in the settings namespace",), ("pattern",), ("src/pages/Settings.tsx",),
         ("src/pages/Settings.tsx", "src/i18n/en.json")),
       O("feature", "German translation for settings", "Plurals via i18next's _one/_other suffixes",
         "de.json added; labels in German run about 30 % longer, so two buttons now wrap onto two lines.",
         ("de.json reviewed by Lena from support",), ("what-changed",), ("src/i18n/de.json",), ("src/i18n/de.json",)),
       O("bugfix", "Buttons wrap in German", "min-width removed, text allowed to wrap",
         "The fixed width of 120 px cut off 'Änderungen speichern'. Buttons size to their label now.",
         (), ("gotcha",), ("src/components/Button.tsx",), ("src/components/Button.tsx",))),
      S("German for the settings page.", "How strings were embedded, i18n library options.",
        "German labels need room: fixed widths break.", "Strings extracted, German added, buttons fixed.",
        "Do the same for the invoice pages.")),
    E(("the date range picker returns the wrong day for people in the US. someone picked Nov 3 and the API got Nov 2",),
      (O("discovery", "Picker converts local midnight to UTC", "toISOString shifts the date",
         "The picker builds new Date(year, month, day) in local time and the client sends toISOString(). For "
         "UTC-5 that is 05:00Z, fine, but the end date is set to 23:59:59 local and sent as the next day; and "
         "the start uses the date part only, which for UTC+ users is the day before.",
         ("bug affects every timezone except UTC",), ("gotcha",), ("src/components/DateRangePicker.tsx",)),
       O("bugfix", "Dates sent as plain YYYY-MM-DD strings", "The API interprets them in the account timezone",
         "The picker now formats the selected days with date-fns format(d, 'yyyy-MM-dd') and the API treats them "
         "as calendar days of the account's timezone.", ("API param names unchanged: from, to",),
         ("problem-solution",), ("src/components/DateRangePicker.tsx", "src/api/client.ts"),
         ("src/components/DateRangePicker.tsx", "src/api/client.ts")),
       O("change", "Tests run under three TZ values", "TZ=America/New_York, UTC, Asia/Tokyo",
         "vitest runs the picker tests three times with a different TZ environment variable.",
         ("npm run test:tz",), ("pattern",), ("package.json",), ("package.json", "vitest.config.ts")),
       O("discovery", "Daylight saving made some ranges 23 hours long", "Fixed by the same change",
         "Ranges across the last Sunday of October lost an hour when computed from instants; calendar days do not.",
         (), ("gotcha",), ("src/components/DateRangePicker.tsx",))),
      S("Fix the date range picker for people west of UTC.", "How the picker builds dates and what the API receives.",
        "A calendar day is not an instant: sending instants made the day depend on the browser's timezone.",
        "Plain dates on the wire, tests in three timezones.", "")),
    E(("Can we show a warning when the session is about to expire instead of throwing away what people were editing?",),
      (O("feature", "Expiry warning two minutes before the session ends", "Modal with 'Stay signed in'",
         "The session store knows the token's exp; a timer opens a modal at exp - 120 s. Staying signed in "
         "calls the refresh endpoint; doing nothing logs out at expiry as before.",
         ("warning at 120 s", "timer reset on every token refresh"), ("what-changed",),
         ("src/store/session.ts",), ("src/store/session.ts", "src/components/ExpiryModal.tsx")),
       O("discovery", "Timers throttled in background tabs", "Chrome delays setTimeout to once a minute",
         "A background tab opened the modal up to a minute late. The check now also runs on visibilitychange.",
         ("intensive throttling after 5 minutes hidden",), ("gotcha",), ("src/store/session.ts",),
         ("src/store/session.ts",)),
       O("feature", "Unsaved drafts kept in sessionStorage", "Restored after sign in",
         "Editors registered with useDraft write their values on change, so even an expired session loses nothing.",
         ("useDraft hook",), ("pattern",), ("src/hooks/useDraft.ts",), ("src/hooks/useDraft.ts",))),
      S("Warn before the session expires so unsaved input survives.", "The session store and timer behaviour in hidden tabs.",
        "Browsers throttle background timers; visibility events catch up.",
        "Expiry modal, refresh on demand, drafts that survive a sign in.", "")),
    E(("Sentry shows 'ResizeObserver loop limit exceeded' about 4,000 times a day. Is it harmful?", "ok and are there other errors in sentry we should look at?"),
      (O("discovery", "ResizeObserver loop error is benign here", "Raised when a callback changes layout",
         "ChartPanel's observer resizes the chart, which changes the container size within the same frame. The "
         "browser reports the loop and delivers the rest next frame; nothing breaks for the user.",
         ("error only in Chrome", "no user-visible effect found"), ("how-it-works",),
         ("src/components/ChartPanel.tsx",)),
       O("change", "Resize handling wrapped in requestAnimationFrame", "Error gone, Sentry filter not needed",
         "Deferring the resize to the next frame breaks the loop; we preferred that to ignoring the error in "
         "Sentry, which would hide a real loop later.", (), ("trade-off",),
         ("src/components/ChartPanel.tsx",), ("src/components/ChartPanel.tsx",)),
       O("discovery", "Top Sentry issue after that: ChunkLoadError after deploys", "Old tabs request deleted chunks",
         "Tabs opened before a deploy ask for chunk files that no longer exist. A handler reloads the page once "
         "when a dynamic import fails.", ("old assets kept for 24 h as well",), ("problem-solution",),
         ("src/main.tsx",), ("src/main.tsx",))),
      S("Decide whether the ResizeObserver errors matter.", "Sentry events and ChartPanel's resize logic.",
        "The error means a callback resized its own target; deferring to the next frame avoids it.",
        "Fix in ChartPanel; error volume down to zero.", "")),
    E(("Set up Playwright for end-to-end tests. Start with login, the metrics page and the settings page.",
       "the login test is flaky on CI, passes locally"),
      (O("feature", "Playwright with three specs", "Runs against vite preview on CI",
         "e2e/login.spec.ts, metrics.spec.ts and settings.spec.ts; the API is mocked with page.route so the "
         "tests do not need the backend.", ("mocks in e2e/fixtures/",), ("what-changed",), ("e2e/login.spec.ts",),
         ("playwright.config.ts", "e2e/login.spec.ts", "e2e/metrics.spec.ts", "e2e/settings.spec.ts")),
       O("bugfix", "Login spec waited for a fixed 500 ms", "Replaced by waiting for the URL",
         "On the slower CI runner the redirect took longer than 500 ms. The spec now awaits "
         "page.waitForURL('/dashboard'), and the waitForTimeout call is banned by an ESLint rule.",
         ("eslint-plugin-playwright no-wait-for-timeout",), ("problem-solution",), ("e2e/login.spec.ts",),
         ("e2e/login.spec.ts", ".eslintrc.cjs")),
       O("change", "Traces and videos kept only for failed tests", "Artifacts 40 MB instead of 600 MB",
         "trace: retain-on-failure and video: retain-on-failure in the Playwright config.", (), ("trade-off",),
         ("playwright.config.ts",), ("playwright.config.ts",))),
      S("End-to-end tests for login, metrics and settings.", "Playwright setup and a flaky login run on CI.",
        "Fixed waits are the usual source of flakiness; wait for a condition instead.",
        "Three Playwright specs running on every pull request, no flaky runs in 40 tries.",
        "Record traces only on failure to keep artifacts small.")),
    E(("the CSV export of the table puts everything in one column when finance opens it in Excel",),
      (O("discovery", "Excel in German locale expects semicolons", "Comma separated files open in one column",
         "Excel uses the list separator of the system locale; for finance's machines that is a semicolon. The "
         "file is valid CSV, Excel just reads it differently.", ("the file had no BOM either, so umlauts broke",),
         ("gotcha",), ("src/utils/csv.ts",)),
       O("feature", "Export offers 'CSV for Excel' with a BOM and semicolons", "Plain CSV stays the default",
         "A second menu entry writes UTF-8 with a byte order mark and ; as separator, so both Excel and scripts "
         "get a file they read correctly.", ("BOM: \\uFEFF",), ("trade-off",), ("src/utils/csv.ts",),
         ("src/utils/csv.ts", "src/components/ExportMenu.tsx")),
       O("bugfix", "Cells starting with = are escaped", "Spreadsheet formula injection",
         "A value such as =HYPERLINK(...) would run as a formula in Excel; values starting with =, +, - or @ get a "
         "leading apostrophe in the Excel export.", ("OWASP CSV injection guidance followed",), ("gotcha",),
         ("src/utils/csv.ts",), ("src/utils/csv.ts",))),
      S("Make the table export open correctly in Excel.", "The exported file in Excel with a German locale.",
        "Excel's CSV parsing depends on the locale; a BOM is needed for UTF-8.",
        "An Excel-specific export next to the plain one.", "")),
    E(("Upgrade React to 18 and turn on StrictMode. Let's see what breaks.", "anything else that changed for tests?"),
      (O("change", "React 18 with createRoot", "Automatic batching now applies everywhere",
         "ReactDOM.render replaced by createRoot in main.tsx; two components relied on setState running "
         "synchronously inside a timeout and were rewritten.", ("2 components changed for batching",),
         ("what-changed",), ("src/main.tsx",), ("src/main.tsx", "src/components/Toast.tsx")),
       O("discovery", "StrictMode mounts effects two times in development", "Found a missing cleanup",
         "The websocket in useLiveAlerts opened two connections under StrictMode because the effect never "
         "closed its socket. Production had the same leak on route changes.",
         ("useLiveAlerts now returns socket.close",), ("gotcha", "problem-solution"), ("src/hooks/useLiveAlerts.ts",),
         ("src/hooks/useLiveAlerts.ts",)),
       O("change", "Testing Library updated, act warnings fixed", "Async updates awaited with findBy",
         "React 18 reports updates outside act; nine tests switched from getBy after a timer to await findBy.",
         ("9 tests changed",), ("what-changed",), ("src/components/Toast.test.tsx",), ("src/components/Toast.test.tsx",))),
      S("React 18 and StrictMode.", "What StrictMode's double effects exposed.",
        "Double-mounting in development finds effects without cleanup.",
        "Upgrade done, a websocket leak fixed along the way.", "Try useTransition on the metrics filters.")),
)

INFRA: tuple[Episode, ...] = (
    E(("The nightly Postgres backup to S3 has not produced a file since Tuesday and nobody got an alert. What happened?",),
      (O("discovery", "Backup job failed on expired AWS credentials", "The CronJob's access key was rotated away",
         "internal/backup/s3.go got AccessDenied on PutObject. The key in the backup secret was deactivated by "
         "the monthly key rotation; the job exited 1 and Kubernetes retried it three times, then gave up quietly.",
         ("last good backup: Tuesday 02:00 UTC", "backup CronJob backoffLimit is 3"), ("problem-solution",),
         ("internal/backup/s3.go", "deploy/backup-cronjob.yaml")),
       O("change", "Backup job uses an IAM role through IRSA", "No long-lived keys left to rotate",
         "The service account is annotated with the backup role; the Go SDK picks up web identity credentials, so "
         "the secret with the access key is deleted.", ("role: backup-writer, s3:PutObject on the backups bucket only",),
         ("what-changed", "why-it-exists"), ("deploy/backup-cronjob.yaml",),
         ("deploy/backup-cronjob.yaml", "terraform/modules/backup/iam.tf")),
       O("feature", "Alert when no backup is newer than 26 hours", "A dead man's switch, not a failure alert",
         "Failures can be silent, so the alert checks for the absence of success: a Prometheus rule on the "
         "timestamp the job pushes after a verified upload.", ("metric backup_last_success_timestamp_seconds",),
         ("pattern",), ("deploy/alerts/backup.yaml",), ("deploy/alerts/backup.yaml", "internal/backup/s3.go"))),
      S("Find why the nightly database backups stopped and why nobody was told.",
        "The CronJob history, the job's logs, the IAM key rotation.",
        "Credential rotation broke a job that had long-lived keys; a failure alert would not have fired on a job "
        "that gave up.", "IRSA role for the job, a missed-backup alert, a manual backup taken.",
        "Do a restore drill: we have never restored one of these backups.")),
    E(("CI takes 14 minutes for a one-line change. Why was the build slow, and can the cache help?", "and the docker image build, can that be cached too?"),
      (O("discovery", "Go module cache never restored on CI", "Cache key included the run id",
         "The actions/cache step keyed on ${{ github.run_id }}, so every run missed and downloaded all modules "
         "(4 minutes) and rebuilt the build cache (6 minutes).", ("cache hit rate was 0 % over 200 runs",),
         ("problem-solution", "gotcha"), (".github/workflows/ci.yml",)),
       O("change", "setup-go with built-in caching keyed on go.sum", "Restores modules and build cache",
         "actions/setup-go@v5 caches GOMODCACHE and GOCACHE keyed on go.sum; a one-line change now builds in 70 s.",
         ("CI 14 min -> 3 min 20 s",), ("what-changed",), (".github/workflows/ci.yml",),
         (".github/workflows/ci.yml",)),
       O("change", "Integration tests only on main and on labelled PRs", "They need a kind cluster",
         "The kind-based tests take 2 minutes; they run on pushes to main and when a PR has the "
         "run-integration label.", ("label: run-integration",), ("trade-off",), (".github/workflows/ci.yml",),
         (".github/workflows/ci.yml",)),
       O("change", "Docker layer cache through the GitHub Actions cache backend", "cache-from: the gha backend",
         "buildx reuses layers between runs; the image build went from 5 minutes to 50 s when only Go code changed.",
         ("docker/build-push-action caches every layer (mode=max)",), ("what-changed",), (".github/workflows/ci.yml",),
         (".github/workflows/ci.yml", "Dockerfile"))),
      S("Make CI fast for small changes.", "Timings per step over the last 200 runs.",
        "A cache key with the run id never hits; setup-go's own cache is keyed properly.",
        "CI down from 14 to about 3 minutes.", "")),
    E(("Implement blue-green rollout in the deployer. Today it patches the deployment in place and a bad image "
       "takes the service down.", "how do we decide the green one is healthy?"),
      (O("feature", "Deployer creates a green Deployment and switches the Service selector", "Blue kept for 15 minutes",
         "rollout.go creates <name>-green with the new image, waits for all replicas to be ready, then patches "
         "the Service's selector from color=blue to color=green. The old Deployment is scaled to zero after 15 "
         "minutes unless someone rolls back.", ("rollback = selector back to blue",), ("what-changed",),
         ("internal/k8s/rollout.go",), ("internal/k8s/rollout.go", "cmd/deployer/main.go")),
       O("decision", "Healthy means ready pods plus a clean synthetic check", "Readiness alone is not enough",
         "Readiness probes only say the process listens. Before switching, the deployer runs the service's "
         "smoke endpoint against the green pods and requires 20 successes in a row.",
         ("smoke check: GET /healthz/deep, 20 consecutive 200s",), ("trade-off",), ("internal/health/probe.go",),
         ("internal/health/probe.go",)),
       O("discovery", "HPA fights the switch", "The autoscaler targets one Deployment",
         "The HorizontalPodAutoscaler pointed at the blue Deployment and scaled it back up after we scaled it "
         "down. The deployer now retargets the HPA after the switch.", ("HPA scaleTargetRef is patched too",),
         ("gotcha",), ("internal/k8s/rollout.go",), ("internal/k8s/rollout.go",))),
      S("Blue-green rollouts in the deployer.", "How the deployer patched deployments and how the HPA targets them.",
        "Readiness is a weak signal for switching traffic; the HPA needs retargeting.",
        "Blue-green with a deep smoke check, 15 minute rollback window, HPA handled.",
        "Try it on the payments API in staging first.")),
    E(("Peer the analytics VPC with the main one. Terraform plan wants to replace the route tables, that can't be right.", "can the analytics people reach the read replica now?"),
      (O("discovery", "Inline routes in aws_route_table conflict with aws_route resources", "Two owners for the same routes",
         "The vpc module defines routes inline while the peering module adds aws_route resources to the same "
         "tables; each apply removes the other's routes. The plan's replacement came from a changed "
         "propagating_vgws list.", ("never mix inline routes and aws_route on one table",), ("gotcha",),
         ("terraform/modules/vpc/main.tf", "terraform/modules/peering/main.tf")),
       O("refactor", "Routes moved out of the route tables into aws_route resources", "terraform state mv, no replacement",
         "Each inline route became an aws_route, imported into state so the plan shows no changes before the "
         "peering routes are added.", ("14 routes imported",), ("pattern",), ("terraform/modules/vpc/main.tf",),
         ("terraform/modules/vpc/main.tf", "terraform/modules/vpc/routes.tf")),
       O("change", "VPC peering between main (10.0.0.0/16) and analytics (10.40.0.0/16)", "DNS resolution enabled both ways",
         "Peering accepted in the same account; security groups allow 5432 from the analytics subnets only.",
         ("allow_remote_vpc_dns_resolution = true",), ("what-changed",), ("terraform/modules/peering/main.tf",),
         ("terraform/modules/peering/main.tf",)),
       O("discovery", "Replica reachable, but its security group named the old CIDR", "Updated to 10.40.0.0/16",
         "psql from the analytics bastion timed out until the replica's security group allowed the peered range.",
         (), ("gotcha",), ("terraform/modules/rds/main.tf",), ("terraform/modules/rds/main.tf",))),
      S("Peer the analytics VPC without replacing route tables.", "The plan's diff and both modules' route handling.",
        "Inline routes and separate route resources cannot share a table.",
        "Routes refactored with state moves, peering applied, plan clean.", "")),
    E(("config loading: if DATABASE_URL is missing the deployer starts anyway and fails 10 minutes later on first "
       "use. Make it fail at startup.", "please also print the config at startup, without secrets"),
      (O("refactor", "Config loaded into a struct and validated once at startup", "One error lists every problem",
         "load.go reads the environment into a Config struct; Validate returns all missing or malformed values "
         "at once, so an operator fixes them in one go instead of one restart per variable.",
         ("required: DATABASE_URL, CLUSTER_NAME, SLACK_WEBHOOK",), ("pattern", "problem-solution"),
         ("internal/config/load.go",), ("internal/config/load.go", "internal/config/load_test.go")),
       O("change", "Durations parsed with time.ParseDuration", "'30' without a unit is rejected",
         "POLL_INTERVAL=30 used to mean 30 ns; the loader now requires a unit.", (),
         ("gotcha",), ("internal/config/load.go",), ("internal/config/load.go",)),
       O("feature", "Effective config logged at startup with secrets masked", "Fields tagged secret print as ***",
         "A struct tag marks secret fields; the startup log shows every value and where it came from.",
         ("tag: secret:\"true\"",), ("pattern",), ("internal/config/load.go",), ("internal/config/load.go",))),
      S("Make the deployer fail fast on bad configuration.", "How config was read lazily across packages.",
        "Lazy config reads delay failures until the first use.",
        "Validated config struct at startup with a complete error list.", "")),
    E(("We're shipping logs with fluentd and it uses 900 MB per node. Can we switch to something lighter?",),
      (O("decision", "Vector as a DaemonSet instead of fluentd", "Rust, about 60 MB per node in our tests",
         "Vector reads container logs, parses JSON, drops health check lines and sends to Loki. Fluent Bit was "
         "the other candidate; Vector's VRL made our parsing rules easier to test.",
         ("memory per node: fluentd 900 MB, Vector 58 MB",), ("trade-off",), ("deploy/logging/vector.yaml",),
         ("deploy/logging/vector.yaml",)),
       O("discovery", "Multi-line Go panics were split into one event per line", "Needs a multiline rule",
         "Vector's kubernetes_logs source has auto_partial_merge but not stack traces; a reduce transform joins "
         "lines starting with a tab or 'goroutine' to the previous event.", ("reduce transform ends on a blank line",),
         ("gotcha",), ("deploy/logging/vector.yaml",), ("deploy/logging/vector.yaml",)),
       O("change", "Health check lines dropped at the node", "30 % fewer log events",
         "Lines for GET /healthz are filtered before shipping.", ("Loki ingestion down 31 %",),
         ("what-changed",), ("deploy/logging/vector.yaml",), ("deploy/logging/vector.yaml",)),
       O("change", "Vector's own metrics scraped by Prometheus", "Dropped events are alerted on",
         "The internal_metrics source exposes component_discarded_events_total; an alert fires when it grows.",
         (), ("what-changed",), ("deploy/logging/vector.yaml",), ("deploy/logging/vector.yaml",))),
      S("Replace fluentd with something lighter.", "Vector and Fluent Bit on a test node.",
        "Vector used a fifteenth of fluentd's memory; stack traces need an explicit merge rule.",
        "Vector rolled out to all nodes, fluentd removed.", "")),
    E(("Rotate the database passwords without downtime. The apps read them from a Kubernetes secret at startup.", "what if a pod does not restart cleanly during rotation?"),
      (O("decision", "Two users per app, rotated alternately", "The old password stays valid until pods restart",
         "Each app has app_a and app_b; rotation sets a new password on the user not in use, updates the secret "
         "and restarts pods, then the other user is rotated next time. No moment where the live password is "
         "invalid.", ("rotation every 30 days",), ("pattern", "trade-off"), ("internal/secrets/rotate.go",),
         ("internal/secrets/rotate.go",)),
       O("feature", "rotate-db-credentials command in the deployer", "Dry run by default",
         "The command prints what it would change; --apply performs the rotation and a rollout restart.",
         ("deployer rotate-db-credentials --app payments --apply",), ("what-changed",), ("cmd/deployer/main.go",),
         ("cmd/deployer/main.go",))),
      S("Rotate database passwords without downtime.", "How apps read credentials and when they reread them.",
        "Alternating between two users keeps one valid password at all times.",
        "Rotation command with dry run; payments rotated in staging.", "Schedule it monthly in production.")),
    E(("readiness probe on the search service flaps every few minutes, pods drop out of the service and come back",),
      (O("discovery", "Readiness probe timeout of 1 s too short during GC pauses", "The JVM pauses for up to 1.4 s",
         "The search service's G1 pauses reach 1.4 s under load; the probe's default timeoutSeconds of 1 fails "
         "and with failureThreshold 1 a single miss removes the pod.", ("probe: timeoutSeconds 1, failureThreshold 1",),
         ("problem-solution",), ("deploy/search/deployment.yaml",)),
       O("change", "Probe timeout 3 s, three failures before unready", "Readiness now tolerates a GC pause",
         "Readiness now tolerates a pause; liveness is looser still (period 20 s, threshold 3) so a slow pod is "
         "taken out of traffic before it would ever be restarted.", ("readiness: timeout 3 s, threshold 3",),
         ("trade-off",), ("deploy/search/deployment.yaml",), ("deploy/search/deployment.yaml",)),
       O("discovery", "Heap was sized for the old index", "Xmx 2 GB for an index now three times larger",
         "GC pauses come from a nearly full heap; the heap is raised to 4 GB and the pod's memory limit with it.",
         ("JVM flag: -Xmx4g",), ("problem-solution",), ("deploy/search/deployment.yaml",), ("deploy/search/deployment.yaml",))),
      S("Stop the search service's readiness flapping.", "Probe settings and GC logs.",
        "A probe must tolerate the service's normal worst-case pause.", "Probe thresholds adjusted; no flaps in 3 days.",
        "Look at the heap size; 1.4 s pauses are long.")),
    E(("We tried restoring last night's database backup into staging for the drill and it fails halfway with "
       "'could not read WAL file'. Are our backups even usable?",
       "so the backups were incomplete the whole time?"),
      (O("discovery", "Backups were base backups without their WAL segments", "Restore needs both",
         "The backup job uploads the pg_basebackup tarball, but the WAL archived during the copy was sent to a "
         "different prefix that has a 7 day lifecycle rule. Any backup older than a week cannot be restored.",
         ("WAL prefix: wal/ with 7 day expiry", "base backups kept 90 days"), ("problem-solution", "gotcha"),
         ("internal/backup/s3.go", "terraform/modules/backup/lifecycle.tf")),
       O("bugfix", "Base backups taken with --wal-method=stream", "Each backup is self-contained",
         "pg_basebackup now streams the WAL it needs into the tarball, so a backup restores on its own whatever "
         "happens to the archive.", ("backup size grows about 6 %",), ("problem-solution",),
         ("internal/backup/s3.go",), ("internal/backup/s3.go",)),
       O("feature", "Weekly automated restore drill", "Restores the newest backup into a scratch instance",
         "A CronJob restores the latest backup, runs row counts on five tables against production's and reports "
         "the result, so an unusable backup is noticed within a week.", ("drill job: backup-restore-drill, Sundays 05:00",),
         ("pattern",), ("deploy/backup-drill.yaml",), ("deploy/backup-drill.yaml", "internal/backup/drill.go"))),
      S("Find out why restoring a database backup failed during the drill.",
        "The restore log, the S3 prefixes and their lifecycle rules, how pg_basebackup was called.",
        "Backups older than a week were unusable: their WAL had expired.",
        "Self-contained backups and a weekly restore drill.",
        "Take a fresh full backup today and keep it outside the lifecycle rule.")),
    E(("Write a Makefile target that runs the linters the same way CI does.", "add a pre-commit hook that runs it on changed files only"),
      (O("change", "make lint runs golangci-lint in the CI's container image", "Same version everywhere",
         "The target runs golangci-lint v1.59 via docker run with the repo mounted, so results match CI exactly "
         "instead of depending on whichever version people have installed.", ("image: golangci/golangci-lint:v1.59",),
         ("why-it-exists",), ("Makefile", ".golangci.yml"), ("Makefile",)),
       O("discovery", "Linter cache must be mounted or each run takes 90 s", "Cache in ~/.cache/golangci-lint",
         "Mounting the host cache directory brings repeated runs down to 8 s.", (), ("gotcha",),
         ("Makefile",), ("Makefile",)),
       O("feature", "pre-commit hook runs golangci-lint on staged Go files", "--new-from-rev=HEAD",
         "The hook lints only what changed, so it takes a couple of seconds on a normal commit.", (), ("what-changed",),
         (".pre-commit-config.yaml",), (".pre-commit-config.yaml",))),
      S("A lint target identical to CI.", "The CI lint step and local versions.",
        "Pinning the linter through its image removes version drift.", "make lint added.", "")),
    E(("terraform apply keeps timing out on the state lock. someone says a job is holding it",),
      (O("discovery", "A cancelled CI job left the DynamoDB lock behind", "Lock held for 3 days",
         "The lock's Info showed a GitHub Actions run that was cancelled mid-apply; cancellation kills terraform "
         "before it can release the lock.", ("lock table: terraform-locks",), ("gotcha",),
         (".github/workflows/terraform.yml",)),
       O("change", "CI applies run in a concurrency group and are never cancelled", "cancel-in-progress: false",
         "The workflow's concurrency group serialises applies and lets a started apply finish; the lock was "
         "released by hand with force-unlock after checking the state.", ("force-unlock run once, lock id in the ticket",),
         ("problem-solution",), (".github/workflows/terraform.yml",), (".github/workflows/terraform.yml",)),
       O("change", "Lock age alarm on the DynamoDB table", "Pages when a lock is older than an hour",
         "A scheduled Lambda checks the lock items' timestamps.", (), ("why-it-exists",), ("terraform/modules/state/main.tf",),
         ("terraform/modules/state/lock_alarm.tf",))),
      S("Clear the stuck Terraform state lock and stop it from happening again.",
        "The lock entry and the run that created it.", "Cancelling an apply leaves its lock.",
        "Lock released; applies serialised and not cancellable.", "")),
    E(("The deployer's unit tests fail on Mondays. Literally only Mondays.", "are there other tests that read the real clock?"),
      (O("discovery", "Tests used time.Now for the maintenance window", "The window is Monday 00:00-06:00",
         "TestDeployAllowed assumed deploys are allowed 'now'; on Monday mornings in UTC the real clock falls in "
         "the maintenance window and the test fails.", ("maintenance window defined in internal/policy/window.go",),
         ("gotcha",), ("internal/policy/window.go", "internal/policy/window_test.go")),
       O("refactor", "Policy takes a clock interface", "Tests pass a fixed instant",
         "Allowed(now time.Time) instead of reading time.Now inside; the tests cover both sides of the window's "
         "edges.", ("tests at Monday 05:59 and 06:00",), ("pattern",), ("internal/policy/window.go",),
         ("internal/policy/window.go", "internal/policy/window_test.go")),
       O("discovery", "Three more tests read time.Now", "Found with a forbidigo lint rule",
         "forbidigo now forbids time.Now outside main and the clock package; the three tests take a fixed time.",
         ("rule: ^time\\.Now$",), ("pattern",), (".golangci.yml",), (".golangci.yml", "internal/rollout/schedule_test.go"))),
      S("Find why the deployer's tests fail on Mondays.", "The failing test and the maintenance window code.",
        "Reading the wall clock inside logic makes tests depend on the day.",
        "Time passed in; edge cases tested.", "")),
    E(("Can you write down how a deploy goes from merge to production? New people keep asking.",),
      (O("discovery", "Deploy path: merge, image build, staging, approval, blue-green", "About 25 minutes end to end",
         "A merge to main builds and signs the image, the deployer rolls it to staging, smoke tests run, a "
         "person approves in the Actions UI, then the blue-green switch happens in production.",
         ("images signed with cosign", "approval by the release-approvers team"), ("how-it-works",),
         (".github/workflows/release.yml", "cmd/deployer/main.go")),
       O("change", "docs/deploying.md with a diagram", "Linked from the README",
         "Written for someone in their first week, with the commands to roll back.", (), ("what-changed",),
         ("docs/deploying.md",), ("docs/deploying.md", "README.md")),
       O("discovery", "Rollback is one command and takes under a minute", "Selector flips back to blue",
         "deployer rollback --service X switches traffic back while the blue Deployment still exists (15 minutes).",
         (), ("how-it-works",), ("cmd/deployer/main.go",))),
      S("Document the deploy path for new people.", "The release workflow and the deployer's commands.",
        "The path has five stages and one manual approval.", "docs/deploying.md written.", "")),
)

BY_PROJECT: dict[str, tuple[Episode, ...]] = {"payments-api": PAYMENTS, "web-dashboard": DASHBOARD,
                                              "infra-tools": INFRA}
