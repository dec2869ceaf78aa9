"""Boot-time configs as Heat has them: OS::Heat::CloudConfig (cloud-config YAML) and
OS::Heat::MultipartMime (a multi-part MIME message of configs, as cloud-init reads user
data). Both are SoftwareConfigs: deployments and servers find them by id."""

from __future__ import annotations

import email
import os
import uuid
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import yaml

from undercloud.orchestration.resources.base import Prop, ResourceFailure
from undercloud.orchestration.resources.heat import SoftwareConfig


class CloudConfig(SoftwareConfig):
    type_name = "OS::Heat::CloudConfig"
    properties_schema = {
        "cloud_config": Prop("map", description="The cloud-config data, written out as YAML."),
    }

    def config(self) -> dict:
        text = yaml.safe_dump(self.properties.get("cloud_config") or {}, default_flow_style=False)
        return {**super().config(), "group": "Heat::Ungrouped", "config": f"#cloud-config\n{text}",
                "options": {}, "inputs": [], "outputs": []}

    def attributes(self) -> dict:
        c = self.config()
        return {"config": c["config"], "software_config": c}


PART = {
    "config": Prop("string", required=True,
                   description="The part's content, inline or the id of another config resource."),
    "filename": Prop("string", description="A file name for the part."),
    "type": Prop("string", default="text", allowed=("text", "multipart"),
                 description="text, or multipart: the config is a message whose parts are appended."),
    "subtype": Prop("string", description="MIME subtype (default: from the file name, else plain)."),
}


class MultipartMime(SoftwareConfig):
    type_name = "OS::Heat::MultipartMime"
    properties_schema = {
        "parts": Prop("list", default=[], description="[{config, filename, type, subtype}] in order.",
                      schema=PART),
    }

    def create(self) -> None:
        super().create()
        self.data["message"] = self.message()

    def message(self) -> str:
        parts = []
        for item in self.properties.get("parts") or []:
            if not isinstance(item, dict) or not isinstance(item.get("config"), str):
                raise ResourceFailure("parts: each part needs a config (a string)")
            text = self._content(item["config"])
            if (item.get("type") or "text") == "multipart":
                inner = email.message_from_string(text)
                if inner.is_multipart():
                    parts += [self._part(p.get_payload(), p.get_content_subtype(), p.get_filename())
                              for p in inner.get_payload()]
            else:
                parts.append(self._part(text, item.get("subtype"), item.get("filename")))
        return MIMEMultipart(_subparts=parts).as_string()

    def _content(self, config: str) -> str:
        """A config resource's content when `config` is one's id, else `config` itself."""
        from undercloud.orchestration.resources.software_deployment import load_config

        try:
            uuid.UUID(config)
            found = load_config(self, config)
        except (ValueError, ResourceFailure):  # not an id, or no such config: the text itself
            return config
        content = found.get("config")
        return content if isinstance(content, str) else yaml.safe_dump(content, default_flow_style=False)

    @staticmethod
    def _part(text: str, subtype: str | None, filename: str | None) -> MIMEText:
        if not subtype and filename:
            subtype = os.path.splitext(filename)[0]
        msg = MIMEText(text, _subtype=subtype) if subtype else MIMEText(text)
        if filename:
            msg.add_header("Content-Disposition", "attachment", filename=filename)
        return msg

    def config(self) -> dict:
        message = self.data.get("message")
        if message is None:
            message = self.data["message"] = self.message()
        return {**super().config(), "group": "Heat::Ungrouped", "config": message,
                "options": {}, "inputs": [], "outputs": []}

    def attributes(self) -> dict:
        c = self.config()
        return {"config": c["config"], "software_config": c}
