"""A throwaway S3-compatible server for the tests: moto in server mode (as fsspec's own tests use it)
on 127.0.0.1 and a free port, in a thread of the test process, for the whole session.

`s3_env` gives a test its own bucket and the AWS variables that point botocore at the server,
with a recognisable fake secret key, so a test can look for it in outputs and files."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

FAKE_SECRET = "FAKEsecretKEY-do-not-log-8d1f0c2e"  # what must never appear in any output or file
FAKE_KEY_ID = "AKIAFAKETESTKEY00001"


@dataclass
class S3Server:
    endpoint: str

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": FAKE_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=FAKE_KEY_ID,
            aws_secret_access_key=FAKE_SECRET,
            region_name="us-east-1",
        )

    def create_bucket(self) -> str:
        name = f"test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object of the bucket under ``prefix``: key -> bytes."""
        client = self.client()
        out = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        return out


@pytest.fixture(scope="session")
def s3_server():
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(endpoint=f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The AWS variables of the test server set in this process; returns (server, a new bucket)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server, s3_server.create_bucket()
