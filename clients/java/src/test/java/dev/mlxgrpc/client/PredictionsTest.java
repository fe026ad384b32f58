package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.Prediction;
import dev.mlxgrpc.v1.TokenIds;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The prediction helper puts text and token ids in the generated oneof (no server needed). */
class PredictionsTest {
  @Test
  void textLandsInTheTextCase() {
    Prediction text = Predictions.text("def f():\n    return 1\n");
    assertEquals(Prediction.ContentCase.TEXT, text.getContentCase());
    assertEquals("def f():\n    return 1\n", text.getText());
    assertEquals(Prediction.ContentCase.TEXT, Predictions.text("").getContentCase(), "set, if empty");
  }

  @Test
  void tokenIdsLandInTheTokensCase() throws Exception {
    Prediction want = Prediction.newBuilder().setTokens(TokenIds.newBuilder().addAllIds(List.of(5, 6, 7))).build();
    assertEquals(want, Predictions.tokens(5, 6, 7));
    assertEquals(want, Predictions.tokens(List.of(5, 6, 7)));
    assertEquals(Prediction.ContentCase.TOKENS, want.getContentCase());
    GenerateRequest req = GenerateRequest.newBuilder().setText("x").setPrediction(Predictions.tokens(5, 6, 7)).build();
    GenerateRequest back = GenerateRequest.parseFrom(req.toByteArray());
    assertTrue(back.hasPrediction());
    assertEquals(List.of(5, 6, 7), back.getPrediction().getTokens().getIdsList());
    assertEquals(Predictions.text("y"), req.toBuilder().setPrediction(Predictions.text("y")).build().getPrediction());
  }
}
