"""The controller: election, state machines, and the inter-broker requests they send."""

from gregor.broker.controller.controller import Controller
from gregor.broker.controller.events import ApiError, ElectionType
from gregor.broker.controller.settings import ControllerSettings
from gregor.broker.controller.shutdown import controlled_shutdown

__all__ = ["ApiError", "Controller", "ControllerSettings", "ElectionType", "controlled_shutdown"]
