"""botocore's DEBUG records are rewritten without the registered secrets, security tokens or signatures."""

from __future__ import annotations

import logging

import pytest

from s3stream.objectstore.s3redact import REDACTED_LOGGERS, install_redaction, redact

SIGNATURE = "0123456789abcdef" * 4


def test_redact_masks_secrets_tokens_and_signatures() -> None:
    dump = ("<AWSPreparedRequest headers={'X-Amz-Security-Token': b'Tok/en+=', 'Authorization': "
            f"b'AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1/s3/aws4_request, Signature={SIGNATURE}'}}>")
    assert redact(dump, ()) == ("<AWSPreparedRequest headers={'X-Amz-Security-Token': b'***', 'Authorization': "
                                "b'AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1/s3/aws4_request, "
                                "Signature=***'}>")
    assert redact("host:h\nx-amz-security-token:Tok/en+=\n", ()) == "host:h\nx-amz-security-token:***\n"
    assert redact(f"Signature:\n{SIGNATURE}", ()) == "Signature:\n***"
    assert redact("?X-Amz-Security-Token=abc&X-Amz-Signature=" + SIGNATURE, ()) == \
        "?X-Amz-Security-Token=***&X-Amz-Signature=***"
    assert redact("the key sekrit-1 and more", ("sekrit-1",)) == "the key *** and more"
    assert redact("nothing to hide: 100%", ("sekrit-1",)) == "nothing to hide: 100%"


def test_the_filter_rewrites_botocore_records_with_their_args(caplog: pytest.LogCaptureFixture) -> None:
    install_redaction(["planted-secret-42"])
    install_redaction([])  # installed once: a second store adds secrets, not filters
    assert all(sum(type(f).__name__ == "RedactingFilter" for f in logging.getLogger(name).filters) == 1
               for name in REDACTED_LOGGERS)
    caplog.set_level(logging.DEBUG)
    logging.getLogger("botocore.auth").debug("CanonicalRequest:\n%s", "x-amz-security-token:tok\nplanted-secret-42")
    logging.getLogger("botocore.endpoint").debug("Sending %s (%d%%)", "planted-secret-42", 5)
    assert [r.getMessage() for r in caplog.records] == ["CanonicalRequest:\nx-amz-security-token:***\n***",
                                                        "Sending *** (5%)"]
