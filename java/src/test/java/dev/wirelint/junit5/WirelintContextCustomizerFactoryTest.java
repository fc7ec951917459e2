package dev.wirelint.junit5;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.core.env.MapPropertySource;
import org.springframework.core.env.StandardEnvironment;

class WirelintContextCustomizerFactoryTest {
  @WirelintTest
  static class Annotated {}

  @ExtendWith(WirelintExtension.class)
  static class Extended {}

  static class Plain {}

  static class Subclass extends Annotated {}

  private final WirelintContextCustomizerFactory factory = new WirelintContextCustomizerFactory();

  @Test
  void classes_with_the_extension_share_a_key_apart_from_the_others() {
    assertNotNull(factory.createContextCustomizer(Annotated.class, List.of()));
    assertNotNull(factory.createContextCustomizer(Extended.class, List.of()));
    assertNotNull(factory.createContextCustomizer(Subclass.class, List.of()));
    assertNull(factory.createContextCustomizer(Plain.class, List.of()), "a class without it keeps its key");
    assertEquals(
        factory.createContextCustomizer(Annotated.class, List.of()),
        factory.createContextCustomizer(Extended.class, List.of()),
        "one context for all the classes with the extension");
  }

  @Test
  void a_property_pointing_elsewhere_is_named() {
    Session.Running running = new Session.Running("mongodb://127.0.0.1:4000/", List.of("spring.mongodb.uri"));
    StandardEnvironment environment = new StandardEnvironment();
    environment
        .getPropertySources()
        .addFirst(new MapPropertySource("test", Map.of("spring.mongodb.uri", "mongodb://app:secret@db:27017/")));
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> WirelintContextCustomizerFactory.Customizer.check("x.BlogTest", environment, running));
    assertTrue(e.getMessage().contains("x.BlogTest has spring.mongodb.uri pointing elsewhere"), e.getMessage());
    assertTrue(e.getMessage().contains("mongodb://***@db:27017/"), "credentials left out: " + e.getMessage());
    StandardEnvironment ours = new StandardEnvironment();
    ours.getPropertySources()
        .addFirst(new MapPropertySource("test", Map.of("spring.mongodb.uri", "mongodb://127.0.0.1:4000/")));
    WirelintContextCustomizerFactory.Customizer.check("x.BlogTest", ours, running);
    WirelintContextCustomizerFactory.Customizer.check("x.BlogTest", environment, null);
  }
}
