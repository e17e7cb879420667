"""The `simple` model (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) as an MLServer
custom runtime, for the side-by-side HTTP benchmark with oip-serve (benchmarks/http_vs_mlserver)."""

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Simple(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return InferenceResponse(
            model_name=self.name,
            id=payload.id,
            outputs=[NumpyCodec.encode_output("OUTPUT0", a + b),
                     NumpyCodec.encode_output("OUTPUT1", a - b)],
        )
