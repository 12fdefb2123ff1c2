"""Echo a BYTES tensor; upper-case it when the request parameter "upper" is true."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if json.loads(request.parameters() or "{}").get("upper"):
                data = np.array([x.upper() for x in data.reshape(-1)], dtype=np.object_).reshape(data.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", data)]))
        return responses
