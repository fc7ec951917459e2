package dev.wirelint.junit5;

import java.lang.reflect.Proxy;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.core.annotation.MergedAnnotation;
import org.springframework.core.annotation.MergedAnnotations;
import org.springframework.core.annotation.MergedAnnotations.SearchStrategy;
import org.springframework.core.env.Environment;
import org.springframework.test.context.ContextConfigurationAttributes;
import org.springframework.test.context.ContextCustomizer;
import org.springframework.test.context.ContextCustomizerFactory;
import org.springframework.test.context.MergedContextConfiguration;

/**
 * Spring's test contexts, for a run with the wirelint extension (loaded by
 * Spring from {@code META-INF/spring.factories}; without Spring it is never
 * loaded).
 *
 * <p>Spring caches a test context by its configuration and reuses it for
 * every test class with the same one. A {@code @SpringBootTest} class
 * without the extension that runs first builds a context pointed straight
 * at the database; a class with the extension would reuse it, and
 * wirelint would see nothing. A class with the extension gets this
 * customizer, which is part of the cache key: such classes share contexts
 * among themselves, built after wirelint started, and never one built
 * without it. (Spring Boot's own key often tells such classes apart by
 * their annotations already; a plain Spring test's does not.) When the context is built, a repointed property that does
 * not hold wirelint's URI (set by the test's own configuration) is an
 * error naming the property and the class. The customizer also adds
 * {@link CommandClaims} to the client Spring Boot builds, which tells
 * tests running in parallel apart.
 */
public final class WirelintContextCustomizerFactory implements ContextCustomizerFactory {

  @Override
  public ContextCustomizer createContextCustomizer(
      Class<?> testClass, List<ContextConfigurationAttributes> configAttributes) {
    return usesExtension(testClass) ? new Customizer(testClass.getName()) : null;
  }

  /** Whether the class (or an enclosing one) has the extension, directly or by a meta-annotation. */
  static boolean usesExtension(Class<?> type) {
    for (Class<?> c = type; c != null; c = c.getEnclosingClass()) {
      boolean found =
          MergedAnnotations.from(c, SearchStrategy.TYPE_HIERARCHY).stream(ExtendWith.class)
              .map(MergedAnnotation::synthesize)
              .anyMatch(e -> Arrays.asList(e.value()).contains(WirelintExtension.class));
      if (found) {
        return true;
      }
    }
    return false;
  }

  /** One for every class with the extension: equal to each other, so they share contexts. */
  static final class Customizer implements ContextCustomizer {
    private final String testClass;

    Customizer(String testClass) {
      this.testClass = testClass;
    }

    @Override
    public void customizeContext(ConfigurableApplicationContext context, MergedContextConfiguration merged) {
      check(testClass, context.getEnvironment(), Session.running());
      installClaims(context);
    }

    /**
     * Adds {@link CommandClaims} to the client Spring Boot builds, through a
     * {@code MongoClientSettingsBuilderCustomizer} bean (Spring Boot 4's or
     * 3's, whichever is there; none without Spring Boot's MongoDB support).
     */
    static void installClaims(ConfigurableApplicationContext context) {
      ClassLoader loader = context.getClassLoader() != null ? context.getClassLoader() : CommandClaims.class.getClassLoader();
      Object listener = CommandClaims.listener(loader);
      Class<?> customizerType =
          firstPresent(
              loader,
              "org.springframework.boot.mongodb.autoconfigure.MongoClientSettingsBuilderCustomizer",
              "org.springframework.boot.autoconfigure.mongo.MongoClientSettingsBuilderCustomizer");
      if (listener == null || customizerType == null) {
        return;
      }
      Class<?> listenerType = listener.getClass().getInterfaces()[0];
      Object customizer =
          Proxy.newProxyInstance(
              loader,
              new Class<?>[] {customizerType},
              (proxy, method, args) ->
                  switch (method.getName()) {
                    case "customize" -> {
                      args[0].getClass().getMethod("addCommandListener", listenerType).invoke(args[0], listener);
                      yield null;
                    }
                    case "equals" -> proxy == args[0];
                    case "hashCode" -> System.identityHashCode(proxy);
                    case "toString" -> "wirelint command claims";
                    default -> null;
                  });
      context.getBeanFactory().registerSingleton("wirelintCommandClaims", customizer);
    }

    private static Class<?> firstPresent(ClassLoader loader, String... names) {
      for (String name : names) {
        try {
          return Class.forName(name, false, loader);
        } catch (ClassNotFoundException e) {
          // The other Spring Boot's.
        }
      }
      return null;
    }

    /** Fails when a repointed property of the context's environment is not wirelint's URI. */
    static void check(String testClass, Environment environment, Session.Running running) {
      if (running == null) {
        return;
      }
      for (String name : running.properties()) {
        String value = environment.getProperty(name);
        if (value != null && !value.equals(running.uri())) {
          throw new IllegalStateException(
              "wirelint: the Spring context of "
                  + testClass
                  + " has "
                  + name
                  + " pointing elsewhere than wirelint ("
                  + ClientUri.redacted(value)
                  + "), set by the test's own configuration: its traffic would bypass wirelint. Remove that"
                  + " setting, or use Wirelint.uri() where it is set (@DynamicPropertySource)");
        }
      }
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof Customizer;
    }

    @Override
    public int hashCode() {
      return Customizer.class.getName().hashCode();
    }
  }
}
