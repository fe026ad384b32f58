"""All mlxgrpc.v1 messages and enums in one namespace: ``pb.GenerateRequest``,
``pb.FINISH_REASON_LENGTH``, ``pb.ModelInfo``, ``pb.TranscribeRequest`` ... (re-exported from
the generated code in ``mlxgrpc_client.gen``), plus the service stub ``pb.InferenceServiceStub``."""

from .gen.mlxgrpc.v1.generation_pb2 import *  # noqa: F401,F403
from .gen.mlxgrpc.v1.model_pb2 import *  # noqa: F401,F403
from .gen.mlxgrpc.v1.lifecycle_pb2 import *  # noqa: F401,F403
from .gen.mlxgrpc.v1.speech_pb2 import *  # noqa: F401,F403
from .gen.mlxgrpc.v1.inference_service_pb2 import *  # noqa: F401,F403
from .gen.mlxgrpc.v1.inference_service_pb2_grpc import InferenceServiceStub  # noqa: F401

del DESCRIPTOR  # noqa: F821 - each star import brought its own file descriptor
# the generated module's own aliases of the modules it imports
del mlxgrpc_dot_v1_dot_generation__pb2, mlxgrpc_dot_v1_dot_model__pb2, mlxgrpc_dot_v1_dot_lifecycle__pb2  # noqa: F821
del mlxgrpc_dot_v1_dot_speech__pb2  # noqa: F821
