"""Secret scrubbing (chapter 31: "Save the exact error message without secrets"): a table of credential
shapes whose value must go while the key name stays, a table of training-log look-alikes that must
survive verbatim, and the places that store user text (run errors, sweep hypotheses) or show it on a
shareable page."""

from __future__ import annotations

import base64
import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import firstdiv
from firstdiv import html
from firstdiv._secrets import Scrubber, scrub_json, scrub_text

# Fake credentials, split so that no scanner mistakes this file for a leak.
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
SIG = "fe5f80f77d5fa3beca038a248ff027d0" + "445342fe2855ddc963176630326f1024"
SLACK = "T024BE7LD/B01J8G3KF7Y/" + "aBcDeFgHiJkLmNoPqRsTuVwX"
TWILIO = "SK" + "0123456789abcdef0123456789abcdef"
SENDGRID = "SG." + "a" * 22 + "." + "B" * 43
TELEGRAM = "110201543:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
DISCORD = "MTE4NTk1NjY0MDk4NjU0NjE4" + ".GzAbCd." + "x" * 27
MAILCHIMP = "0123456789abcdef0123456789abcdef" + "-us12"
SQUARE = "sq0csp-" + "A" * 43
ARTIFACTORY = "AKC" + "p8abcDEF1234567"
AZURE = "A" * 86 + "=="
YA29 = "ya29." + "a0AfH6SMBxQz7Lm9Kp2Wq8Rt5Yu3Io1Pa4Sd6Fg"
WANDB = "0123456789abcdef0123456789abcdef01234567"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "SflKxwRJSMeKKF2QT4fwpM"

# (text as it appears in a log or a pasted error, the secret that must go, what must stay)
SHAPES = [
    # camelCase and PascalCase key names
    ('{"accessToken": "a0AfH6SMBx3gQ1"}', "a0AfH6SMBx3gQ1", '"accessToken": "[redacted]"'),
    ("refreshToken=1//0gLx9Q2KfzRt", "1//0gLx9Q2KfzRt", "refreshToken=[redacted]"),
    ("oauth idToken: idt0k3nV4lu3", "idt0k3nV4lu3", "idToken: [redacted]"),
    ("SessionToken=FwoGZXIvYXdzEJr", "FwoGZXIvYXdzEJr", "SessionToken=[redacted]"),
    ("clientSecret='cl13ntS3cr3t'", "cl13ntS3cr3t", "clientSecret='[redacted]'"),
    ("apiKey: k3yV4lu3xyz", "k3yV4lu3xyz", "apiKey: [redacted]"),
    ("x-api-key: 9f8e7d6c5b4a", "9f8e7d6c5b4a", "x-api-key: [redacted]"),
    ("//registry.npmjs.org/:_authToken=npmt0k3n123", "npmt0k3n123", "_authToken=[redacted]"),
    # snake and environment-variable names
    ("export HF_TOKEN=hfvalue_not_prefixed_123", "hfvalue_not_prefixed_123", "HF_TOKEN=[redacted]"),
    ("WANDB_API_KEY=k3y-v4lue-99 python train.py", "k3y-v4lue-99", "WANDB_API_KEY=[redacted] python train.py"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI", "AWS_SECRET_ACCESS_KEY=[redacted]"),
    ("KAGGLE_KEY=kaggl3k3y", "kaggl3k3y", "KAGGLE_KEY=[redacted]"),
    ("NEPTUNE_API_TOKEN=n3ptun3", "n3ptun3", "NEPTUNE_API_TOKEN=[redacted]"),
    ("SENTRY_DSN=https://b1c2d3@o1.ingest.sentry.io/5", "b1c2d3", "SENTRY_DSN=[redacted]"),
    ("SSHPASS=sshp4ss sshpass -e ssh gpu1", "sshp4ss", "SSHPASS=[redacted]"),
    ("db_passphrase: p4ssphr4se", "p4ssphr4se", "db_passphrase: [redacted]"),
    ("psql failed: password=hunter2 host=db", "hunter2", "password=[redacted] host=db"),
    ("DB_PASS=Pa55w0rdX cloudant_pw: cl0ud4ntPw", "cl0ud4ntPw", "DB_PASS=[redacted] cloudant_pw: [redacted]"),
    ("--password=FlagPw1 --user bot", "FlagPw1", "--password=[redacted] --user bot"),
    ("--hub-token hubt0k3n --push", "hubt0k3n", "--hub-token [redacted] --push"),
    ("huggingface-cli login --token abcdef0123456789", "abcdef0123456789", "login --token [redacted]"),
    # URLs
    ("redis://:s3cretPW@cache:6379/0", "s3cretPW", "redis://:[redacted]@cache:6379/0"),
    ("postgres://trainer:Xq7@zz9@db:5432/runs", "Xq7@zz9", "postgres://trainer:[redacted]@db:5432/runs"),
    ("mongodb+srv://admin:M0ngoPw@cluster0.x.mongodb.net/db", "M0ngoPw", "mongodb+srv://admin:[redacted]@cluster0"),
    ("git clone https://oauth2:gitl4bpw@gitlab.example.com/a.git", "gitl4bpw", "https://oauth2:[redacted]@gitlab"),
    (f"GET https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={SIG}", SIG,
     "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=[redacted]"),
    ("?X-Amz-Credential=AKIDEXAMPLE%2F20240101&X-Amz-Security-Token=IQoJb3JpZ2lu", "IQoJb3JpZ2lu",
     "X-Amz-Security-Token=[redacted]"),
    ("https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sr=b&sig=Ab3dEf%2Bgh%3D&se=2024", "Ab3dEf%2Bgh%3D",
     "sv=2022-11-02&sr=b&sig=[redacted]&se=2024"),
    ("https://storage.googleapis.com/b/o?X-Goog-Signature=5a1b2c3d4e5f", "5a1b2c3d4e5f", "X-Goog-Signature=[redacted]"),
    ("https://d1.cloudfront.net/x?Expires=1700000000&Signature=abcDEF~xyz&Key-Pair-Id=K2", "abcDEF~xyz",
     "Expires=1700000000&Signature=[redacted]&Key-Pair-Id=K2"),
    ("https://maps.googleapis.com/api?key=plainkeyvalue123&q=1", "plainkeyvalue123", "?key=[redacted]&q=1"),
    ("https://api.example.com/v1?access_token=acc3sst0k", "acc3sst0k", "?access_token=[redacted]"),
    (f"notify https://hooks.slack.com/services/{SLACK} failed", SLACK.split("/")[-1],
     "notify https://hooks.slack.com/services/[redacted] failed"),
    ("https://discord.com/api/webhooks/123456789012345678/AbCdEf-gh_IJkl", "AbCdEf-gh_IJkl",
     "https://discord.com/api/webhooks/[redacted]"),
    # headers
    ("Set-Cookie: session=8f14e45fceea167a; Path=/; HttpOnly", "8f14e45fceea167a", "Set-Cookie: [redacted]"),
    ("Cookie: _ga=GA1.2; sessionid=q8w9e7r6t5", "q8w9e7r6t5", "Cookie: [redacted]"),
    ("curl -H 'Authorization: Bearer abc.def-ghi' https://x", "abc.def-ghi", "Authorization: Bearer [redacted]"),
    ('headers {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}', "dXNlcjpwYXNzd29yZA", '"Authorization": "[redacted]"'),
    # command lines
    ("mysql -h db -u root -pHunter2pw training_db", "Hunter2pw", "mysql -h db -u root -p[redacted] training_db"),
    ("mysqldump -uroot -p'Dump3r' runs > runs.sql", "Dump3r", "-uroot -p[redacted] runs"),
    ("sshpass -p 'S5hpassW' ssh user@gpu1", "S5hpassW", "sshpass -p [redacted] ssh user@gpu1"),
    ("sshpass -pS5hpass2 rsync -a ckpt/ gpu1:", "S5hpass2", "sshpass -p[redacted] rsync"),
    ("curl -u admin:CurlPw9 https://artifacts", "CurlPw9", "curl -u admin:[redacted] https://artifacts"),
    ("docker login -u bot -p D0ckerPw registry.example.com", "D0ckerPw", "-p [redacted] registry.example.com"),
    ("redis-cli -h cache -a R3disPw ping", "R3disPw", "redis-cli -h cache -a [redacted] ping"),
    ("openssl rsa -in k.pem -passin pass:Ss1Pw", "Ss1Pw", "-passin pass:[redacted]"),
    (f"wandb login {WANDB}", WANDB, "wandb login [redacted]"),
    (f"wandb login --host https://wandb.example.com {WANDB}", WANDB, "--host https://wandb.example.com [redacted]"),
    (f"wandb login --relogin '{WANDB.upper()}'", WANDB.upper(), "wandb login --relogin '[redacted]'"),
    (f"wandb.login(key='{WANDB}', relogin=True)", WANDB, "wandb.login(key='[redacted]', relogin=True)"),
    # credentials given in prose, after the word that names them
    ("signature mismatch for secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI",
     "signature mismatch for secret [redacted]"),
    ("aws secret access key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY rejected", "wJalrXUtnFEMI",
     "aws secret access key [redacted] rejected"),
    ("the password is Hunter2Correct-Horse", "Hunter2Correct-Horse", "the password is [redacted]"),
    ("login failed: the passphrase was 'c0rrect horse'.", "c0rrect horse", "the passphrase was '[redacted]'."),
    ("my api key is Zk3pQ9xW2vL7 (do not share)", "Zk3pQ9xW2vL7", "my api key is [redacted] (do not share)"),
    (f"wandb: ERROR invalid token {WANDB}", WANDB, "wandb: ERROR invalid token [redacted]"),
    # .netrc
    ("machine api.wandb.ai login user password N3trcPw", "N3trcPw", "login user password [redacted]"),
    ("machine huggingface.co\n  login hf_user\n  password N3trc2pw\n", "N3trc2pw", "password [redacted]"),
    # environment dumps after a leading text line
    ("RuntimeError: NCCL timeout\nPATH=/usr/bin\nHOME=/root\nDB_CONN=s3cretc0nn", "s3cretc0nn", "RuntimeError: NCCL timeout"),
    ("Environment: PATH=/usr/bin HOME=/root MY_THING=s3cretth1ng", "s3cretth1ng", "Environment:"),
    ("NCCL error on [rank0]:\n[rank0]: PATH=/usr/bin\n[rank0]: HOME=/root\n[rank0]: PRIVATE_X=r4nkpr1v", "r4nkpr1v",
     "NCCL error on [rank0]:"),
    ('declare -x HOME="/root"\ndeclare -x USER="me"\ndeclare -x INTERNAL="d3cl4r3d"', "d3cl4r3d", ""),
    # vendor tokens (ours and detect-secrets' plugins)
    (f"HfHubHTTPError 401 with token {HF}", HF, "HfHubHTTPError 401 with token [redacted]"),
    ("git push failed: ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "ghp_a1B2c3D4e5F6", "git push failed: [redacted]"),
    ("anthropic: key sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm", "Zx9Yw8Vu7Ts6", "anthropic: key [redacted]"),
    ("boto3 used AKIA" + "IOSFODNN7EXAMPLE for s3://bucket", "AKIAIOSFODNN7EXAMPLE", "boto3 used [redacted] for s3://bucket"),
    (f"google oauth {YA29} expired", YA29, "google oauth [redacted] expired"),
    (f"wandb: jwt {JWT}", "SflKxwRJSMeKKF2QT4fwpM", "wandb: jwt [redacted]"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\ndone", "b3BlbnNzaC1rZXk", "done"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0pgpblock\n-----END PGP PRIVATE KEY BLOCK-----", "lQOYBF0pgpblock", ""),
    (f"twilio client with {TWILIO} refused", TWILIO, "twilio client with [redacted] refused"),
    (f"sendgrid {SENDGRID} 403", SENDGRID, "sendgrid [redacted] 403"),
    (f"telegram bot {TELEGRAM} unauthorized", TELEGRAM, "telegram bot [redacted] unauthorized"),
    (f"discord bot {DISCORD} rejected", DISCORD, "discord bot [redacted] rejected"),
    (f"mailchimp {MAILCHIMP} invalid", MAILCHIMP, "mailchimp [redacted] invalid"),
    (f"square {SQUARE} bad", SQUARE, "square [redacted] bad"),
    (f"artifactory {ARTIFACTORY} denied", ARTIFACTORY, "artifactory [redacted] denied"),
    (f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE};EndpointSuffix=core.windows.net", AZURE[:40],
     "AccountName=acct;AccountKey=[redacted];EndpointSuffix=core.windows.net"),
]

# Realistic non-secrets from training logs and configs: kept verbatim, nothing counted.
LOOKALIKES = [
    "learning_rate=3e-4 batch_size=32 weight_decay=1e-2 seed=42 dropout=0.1",
    "config_hash=9f86d081884c7d659a2feaa0c55ad015 identity=4b825dc642cb",
    "code version 4b825dc642cb6eb9a060e54bf8d69288fbee4904+dirty",
    "data sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "sort_key=val_loss monitor=val_loss mode=min",
    "tokenizer=gpt2 max_tokens=128 num_tokens: 40 token_count=7",
    "inputs: input_ids, token_type_ids, attention_mask",
    "primary_key: id",
    "cache_key: 3f2a9c81d0e4b7a6",
    "sortKey=created primaryKey: run_id cacheKey: ab12cd34",
    "foreign_key: user_id partition_key=date group_key=seed public_key: ssh-ed25519",
    "tokenizer.pad_token=<pad> eos_token: </s> bos_token=<s> next_token=42 start_token: <bos>",
    "saved to /home/me/runs/exp1/checkpoint-1000/pytorch_model.bin and s3://bucket/ckpt/step_1000/",
    "C:\\Users\\me\\runs\\exp1 and ./outputs/2024-01-01_12-30-45/metrics.jsonl",
    "downloading https://huggingface.co/gpt2/resolve/main/config.json",
    "scp model.pt me@gpu1:/data && git@github.com:org/repo.git",
    "psql: FATAL: password authentication failed for user \"trainer\"",
    "--password-file /run/secrets/db --token-type-ids on --sort-key val_loss",
    "mysql -h db -P 3306 -u reader -p training_db",
    "ssh -p 2222 user@gpu1",
    "significance sig=0.01 key=val_loss",
    "KeyError: 'attention_mask' in dict_keys(['loss', 'acc'])",
    "hf_hub_download(repo_id='meta-llama/Llama-2-7b-hf') sk-learn risk-free monkey=1",
    "CUBLAS_WORKSPACE_CONFIG=:4096:8 CUDA_VISIBLE_DEVICES=0",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "wandb: Syncing run https://wandb.ai/team/proj/runs/3f9a2b1c",
    "step=1000 loss=2.31 grad_norm=0.98 at 2024-01-01T12:30:45",
    "APIConnectionError: Connection error. TASK_ID=7 eos_token_id=2",
    "model.embed_tokens.weight: shape (32000, 4096)",
    "forward_pass: 12.3 ms backward_pass=20.1 ms second_pass=on",
    "token=None api_key: null HF_TOKEN=$HF_TOKEN password=${DB_PASSWORD} api_key=<your-key> secret=***",
    'huggingface-cli login --token "$HF_TOKEN" --add-to-git-credential',
    "http://localhost:8080/metrics and https://user@example.com/path",
    "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 on main; code version 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "config hash e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 seed 3",
    "the password is required; the secret is in the warmup; the token was rejected; password authentication failed",
    "Token indices sequence length is longer than the specified maximum (1024 > 512); token 50256 at step 12",
    "the pad token is [PAD] and the eos token is </s>; next token 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "secret 'hf-creds' not found; the password is 8 characters; loss 2.3125 for tensor of shape (32, 4096)",
    "secret key file /run/secrets/aws/credentials missing; token ./tokens/vocab-32000.json",
]


@pytest.mark.parametrize("text, secret, kept", SHAPES, ids=[f"{i}-{s[0][:24]}" for i, s in enumerate(SHAPES)])
def test_each_credential_shape_loses_its_value_and_keeps_its_name(text, secret, kept):
    assert secret in text  # precondition: the case carries the secret
    scrub = Scrubber()
    out = scrub.text(text)
    assert secret not in out and kept in out, out
    assert scrub.redacted + scrub.dropped >= 1
    again = Scrubber()
    assert again.text(out) == out and again.redacted == again.dropped == 0  # closing an incident scrubs twice


@pytest.mark.parametrize("text", LOOKALIKES)
def test_training_log_lookalikes_survive_verbatim(text):
    scrub = Scrubber()
    assert scrub.text(text) == text and scrub.redacted == scrub.dropped == 0


MB = 1 << 20
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
#: a megabyte of each shape that made a rule retry a token from each of its characters (or an occurrence from
#: each earlier one): one unbroken token, short tokens, long lines of signs, base64, hex, JSON, and runs of the
#: words and prefixes that start a credential shape
MEGABYTES = {
    "one token": lambda rnd: "".join(rnd.choices(ALNUM, k=MB)),
    "base64": lambda rnd: base64.b64encode(rnd.randbytes(MB)).decode(),
    "hex": lambda rnd: rnd.randbytes(MB).hex(),
    "json": lambda rnd: json.dumps({f"key_{i}": [i, f"val{i}", {"x": 0.5}] for i in range(MB // 30)}),
    **{unit.strip(): (lambda rnd, unit=unit: unit * (MB // len(unit) + 1)) for unit in (
        "a", "w1 ", "a=", "k1=v1 ", "see http://host.example/a?b ", "xsk-", "_eyJabcdefghijk", "mysql -u ",
        "curl -u x ", "//a.b/", "x://", "token is ", "default login ", "wandb.login(", "aws key ", "--sshpass ")},
}


@pytest.mark.parametrize("shape", MEGABYTES)
def test_a_megabyte_of_any_shape_is_scrubbed_in_linear_time(shape):
    """A linear scrubber takes well under a second here; one that rescans a token from each of its characters
    takes hours (16 KB of one token took seconds). The alarm is a ceiling of minutes for a loaded machine, not
    a measurement (benchmarks/scrub_speed.py prints the times and their growth per doubling)."""
    text = MEGABYTES[shape](random.Random(0))[:MB] + f" password={PW}"

    def too_slow(signum, frame):
        raise TimeoutError(f"scrubbing 1 MB of {shape!r} took more than 2 minutes: some rule is quadratic")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(120)
    try:
        out = scrub_text(text)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert out == text.replace(PW, "[redacted]")  # the secret found, everything else verbatim


def test_the_tables_are_as_large_as_promised():
    assert len(SHAPES) >= 50 and len(LOOKALIKES) >= 20


def test_json_keys_use_the_same_name_rules():
    data = {"accessToken": "a", "SessionToken": {"v": "b"}, "sort_key": "val_loss", "primary_key": "id",
            "cache_key": "3f2a", "cacheKey": "x", "nested": [{"refreshToken": "c", "max_tokens": 128}],
            "aws": {"secretAccessKey": "d", "accessKeyId": "AKID"}}
    assert scrub_json(data) == {"accessToken": "[redacted]", "SessionToken": "[redacted]", "sort_key": "val_loss",
                                "primary_key": "id", "cache_key": "3f2a", "cacheKey": "x",
                                "nested": [{"refreshToken": "[redacted]", "max_tokens": 128}],
                                "aws": {"secretAccessKey": "[redacted]", "accessKeyId": "AKID"}}


def test_firstdivs_own_report_keys_survive_in_attached_json():
    own = {"playbook_key": "optimizer.stale_parameter", "changed_token": 3, "eval_keys": ["eval_split"],
           "config_hash": "9f86d081", "identity": "4b825dc642cb", "state_hash": "e3b0c442"}
    assert scrub_json(own) == own


def test_importing_firstdiv_does_not_import_the_detector():
    code = "import sys, firstdiv, firstdiv._secrets, firstdiv.lab.store; print('detect_secrets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- what the store keeps and what the sweep page shows -----------------------------------------

PW = "Zr8" + "qTw2mVp"
WORKLOAD = f'''
import firstdiv

@firstdiv.workload(defaults={{"epochs": 1}})
def train(seed, config, rec):
    if seed == 1:
        raise RuntimeError("upload to https://trainer:{PW}@hub.example/x failed with token {HF}")
    rec.log(val_loss=1.0 + 0.01 * seed)
'''


def _store_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def test_run_errors_and_hypotheses_are_stored_and_shown_scrubbed(tmp_path, store_path):
    script = tmp_path / "leaky.py"
    script.write_text(textwrap.dedent(WORKLOAD))
    hypothesis = f"pushing with HF_TOKEN={HF} is as fast as before"
    kw = {"name": "leaky", "store": store_path, "hypothesis": hypothesis, "success": "val_loss delta within noise"}
    result = firstdiv.sweep(f"{script}:train", "0-2", **kw)
    assert [r.seed for r in result.failed] == [1]
    raw = _store_bytes(store_path)
    assert PW.encode() not in raw and HF.encode() not in raw
    conn = sqlite3.connect(store_path)
    info = json.loads(conn.execute("SELECT info FROM sweeps").fetchone()[0])
    errors = [json.loads(r[0])["error"] for r in conn.execute("SELECT record FROM runs WHERE status != 'ok'")]
    conn.close()
    assert info["hypothesis"] == "pushing with HF_TOKEN=[redacted] is as fast as before"
    assert "https://trainer:[redacted]@hub.example/x failed with token [redacted]" in errors[0]
    page = html.to_html(result)  # the in-memory result of the sweep, as `sweep --html` writes it
    assert PW not in page and HF not in page and "HF_TOKEN=[redacted]" in page and "trainer:[redacted]@hub" in page
    again = firstdiv.sweep(f"{script}:train", "0-2", **kw)  # the same declaration again is the same sweep
    assert again.sweep.id == result.sweep.id


def test_pages_scrub_what_an_older_store_kept_unscrubbed():
    from firstdiv.render.html import _build

    info = {"name": "old", "hypothesis": f"token={HF} helps", "success": "val_loss delta within noise"}
    rows = {r["label"]: r["value"] for r in _build.sweep_identity(info, [])}
    assert rows["hypothesis"] == "token=[redacted] helps"
    declared = _build._declared({"hypothesis": f"token={HF} helps", "success": "val_loss delta within noise", "result": "PASS"})
    assert declared == {"hypothesis": "token=[redacted] helps", "success": "val_loss delta within noise", "result": "PASS"}
