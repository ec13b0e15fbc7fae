"""API serializers: thin wrappers around Call.to_json, the one JSON shape of a call."""
from rest_framework import serializers


class CallSerializer(serializers.BaseSerializer):
    def to_representation(self, instance):
        return instance.to_json(decisions=self.context.get("detail", False))
