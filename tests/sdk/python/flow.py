"""A produce, read, group and subscription flow through the Python client that
openapi-python-client generates from openapi/herald.json (tests/it/docs/sdk.rs generates it into a
temporary directory and runs this script against a node it started).

Usage: flow.py BASE_URL CLIENT_ID CLIENT_SECRET

Exits non-zero with the failed step on stderr. Every wait has a deadline.
"""

import sys
import time

from herald_client import AuthenticatedClient, Client
from herald_client.api.auth import token as token_api
from herald_client.api.groups import commit_offsets, describe_group, join_group, leave_group, poll
from herald_client.api.messages import fetch, produce
from herald_client.api.subscriptions import ack, get_subscription, pull, put_subscription
from herald_client.api.topics import create_topic, describe_topic
from herald_client.models import (
    AckRequest,
    CommitRequest,
    CreateTopicRequest,
    JoinGroupRequest,
    OffsetCommitDto,
    PollRequest,
    ProduceMessage,
    ProduceRequest,
    PullRequest,
    PutSubscriptionRequest,
    StartPositionDto,
    TokenRequestForm,
)
from herald_client.models import Problem

DEADLINE_S = 20.0
TOPIC = "sdk-python"
MESSAGES = [("k-0", {"n": 0, "text": "zero"}), ("k-1", {"n": 1, "text": "one"}), ("k-2", {"n": 2})]


def check(condition, what):
    if not condition:
        raise SystemExit(f"python sdk flow: {what}")


def ok(response, what, status=200):
    """The parsed body of a response with the expected status (a Problem is a failure)."""
    check(
        response.status_code == status and not isinstance(response.parsed, Problem),
        f"{what}: HTTP {response.status_code}: {response.content[:300]!r}",
    )
    return response.parsed


def main():
    base_url, client_id, client_secret = sys.argv[1:4]
    anonymous = Client(base_url=base_url, timeout=10.0)
    issued = ok(
        token_api.sync_detailed(
            client=anonymous,
            body=TokenRequestForm(
                grant_type="client_credentials", client_id=client_id, client_secret=client_secret
            ),
        ),
        "token",
    )
    check(issued.token_type.lower() == "bearer", f"token type {issued.token_type}")
    client = AuthenticatedClient(base_url=base_url, token=issued.access_token, timeout=30.0)

    ok(
        create_topic.sync_detailed(client=client, body=CreateTopicRequest(name=TOPIC, partitions=2)),
        "create topic",
        201,
    )
    topic = ok(describe_topic.sync_detailed(TOPIC, client=client), "describe topic")
    check(len(topic.partitions) == 2, f"partitions: {topic.partitions}")

    # The messages go to one partition, so their offsets are 0, 1, 2 in request order.
    produced = ok(
        produce.sync_detailed(
            TOPIC,
            client=client,
            body=ProduceRequest(
                messages=[ProduceMessage(key=key, value=value, partition=1) for key, value in MESSAGES]
            ),
        ),
        "produce",
    )
    check([offset.offset for offset in produced.offsets] == [0, 1, 2], f"offsets {produced.to_dict()}")

    read = ok(fetch.sync_detailed(TOPIC, 1, client=client, offset="0", max_messages=10), "fetch")
    check(read.high_watermark == 3, f"high watermark {read.high_watermark}")
    check(
        [(message.key, message.value) for message in read.messages] == MESSAGES,
        f"read back {[message.to_dict() for message in read.messages]}",
    )

    # A consumer group: join, poll everything, commit, and the group's lag is 0.
    member = ok(
        join_group.sync_detailed(
            "sdk-python-group", client=client, body=JoinGroupRequest(topics=[TOPIC])
        ),
        "join group",
    )
    consumed = []
    deadline = time.monotonic() + DEADLINE_S
    generation = member.generation
    cursor = None
    while len(consumed) < len(MESSAGES):
        check(time.monotonic() < deadline, f"group poll got {len(consumed)} messages")
        polled = ok(
            poll.sync_detailed(
                "sdk-python-group",
                member.member_id,
                client=client,
                body=PollRequest(generation=generation, cursor=cursor, max_wait_ms=500),
            ),
            "poll",
        )
        generation, cursor = polled.generation, polled.cursor
        consumed.extend(polled.messages)
    check(sorted(message.offset for message in consumed) == [0, 1, 2], "polled offsets")
    committed = commit_offsets.sync_detailed(
            "sdk-python-group",
            client=client,
            body=CommitRequest(
                generation=generation,
                member_id=member.member_id,
                offsets=[OffsetCommitDto(topic=TOPIC, partition=1, offset=3)],
            ),
    )
    check(committed.status_code == 204, f"commit: HTTP {committed.status_code}: {committed.content[:300]!r}")
    group = ok(describe_group.sync_detailed("sdk-python-group", client=client), "describe group")
    lags = {(offset.topic, offset.partition): offset.lag for offset in group.offsets}
    check(lags.get((TOPIC, 1)) == 0, f"lag after commit: {group.to_dict()}")
    leave = leave_group.sync_detailed("sdk-python-group", member.member_id, client=client)
    check(leave.status_code == 204, f"leave: HTTP {leave.status_code}")

    # A queue subscription: pull every message, ack them, nothing left in flight or backlog.
    ok(
        put_subscription.sync_detailed(
            "sdk-python-sub",
            client=client,
            body=PutSubscriptionRequest(topic=TOPIC, start=StartPositionDto.EARLIEST),
        ),
        "create subscription",
        201,
    )
    pulled = []
    deadline = time.monotonic() + DEADLINE_S
    while len(pulled) < len(MESSAGES):
        check(time.monotonic() < deadline, f"pull got {len(pulled)} messages")
        answer = ok(
            pull.sync_detailed(
                "sdk-python-sub", client=client, body=PullRequest(max_messages=10, max_wait_ms=500)
            ),
            "pull",
        )
        pulled.extend(answer.messages)
    check(sorted(item.message.value["n"] for item in pulled) == [0, 1, 2], "pulled values")
    acked = ok(
        ack.sync_detailed(
            "sdk-python-sub", client=client, body=AckRequest(ack_ids=[item.ack_id for item in pulled])
        ),
        "ack",
    )
    check(len(acked.acked) == len(MESSAGES) and not acked.expired, f"ack: {acked.to_dict()}")
    deadline = time.monotonic() + DEADLINE_S
    while True:
        subscription = ok(get_subscription.sync_detailed("sdk-python-sub", client=client), "subscription")
        if subscription.in_flight == 0 and subscription.backlog == 0:
            break
        check(time.monotonic() < deadline, f"subscription never drained: {subscription.to_dict()}")
        time.sleep(0.1)
    print("python sdk flow: ok")


if __name__ == "__main__":
    main()
