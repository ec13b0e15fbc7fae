"""API serializers: thin wrappers around Call.to_json, the one JSON shape of a call.

`CallSerializer` renders; the `*Doc` serializers only describe that shape for the OpenAPI
schema (/api/schema/), so the documentation cannot drift into a second implementation.
"""
from rest_framework import serializers

from ..audit import TEXTS, readable
from ..models import AuditEvent, Outcome, Verb


class CallSerializer(serializers.BaseSerializer):
    def to_representation(self, instance):
        return instance.to_json(decisions=self.context.get("detail", False))


class PodDoc(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    uid = serializers.CharField()


class FindingDoc(serializers.Serializer):
    kind = serializers.CharField()
    detail = serializers.CharField()


class DecisionDoc(serializers.Serializer):
    node = serializers.CharField()
    backend = serializers.CharField()
    result = serializers.ChoiceField(["passed", "failed", "unresolvable", "scored"])
    reason = serializers.CharField(allow_null=True)
    score = serializers.IntegerField(allow_null=True)
    weighted_score = serializers.IntegerField(allow_null=True)


class BackendCallDoc(serializers.Serializer):
    id = serializers.IntegerField()
    backend = serializers.CharField()
    verb = serializers.ChoiceField(Verb.values)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()
    duration_ms = serializers.FloatField()
    outcome = serializers.ChoiceField(Outcome.values)
    http_status = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    findings = FindingDoc(many=True)


class CallDoc(BackendCallDoc):
    form = serializers.ChoiceField(["per-backend", "combined"])
    pod = PodDoc()
    attempt = serializers.CharField()
    node_count = serializers.IntegerField()
    passed_count = serializers.IntegerField()
    failed_count = serializers.IntegerField()
    unresolvable_count = serializers.IntegerField()
    response_status = serializers.IntegerField(allow_null=True, help_text="what extproxy answered the scheduler")


class CallDetailDoc(CallDoc):
    decisions = DecisionDoc(many=True)
    backend_calls = BackendCallDoc(many=True, required=False, help_text="combined calls only")


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "action", "target", "source", "detail"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        for name in TEXTS:  # an event stored with a lone surrogate: "?", as exports write it
            data[name] = readable(data[name])
        return data
